"""A generated Markdown section spliced into a document between its begin/end markers (the tables of
bench/sft_table.py and bench/perf_table.py)."""
import sys


def write_section(text, begin, end, path=None):
    """Prints `text` (which starts with `begin` and ends with `end`) when `path` is None; else
    replaces the text between the markers in the file at `path`, or appends `text` when the markers
    are absent."""
    if not path:
        sys.stdout.write(text)
        return
    with open(path) as f:
        doc = f.read()
    if begin in doc and end in doc:
        doc = doc[:doc.index(begin)] + text.rstrip("\n") + doc[doc.index(end) + len(end):]
    else:
        doc = doc.rstrip("\n") + "\n\n" + text
    with open(path, "w") as f:
        f.write(doc)
