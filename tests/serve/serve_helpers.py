"""Shared pieces of fbt serve's Python tests (check_openai_client.py, check_chat_page.py): a tiny
trained checkpoint and a running `fbt serve` on a free port.

Exit code 77 is CTest's skip (SKIP_RETURN_CODE)."""
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request

SKIP = 77


def skip(message):
    print("skipped:", message)
    sys.exit(SKIP)


def make_checkpoint(fbt, shared_data, tmp, context=4096, steps=30):
    """A byte-tokenizer `debug` run on TinyShakespeare (RUN = tmp/run): `fbt prepare` then `fbt
    train` for `steps` steps on 128-token windows, with model.context = `context` (long: a request
    of thousands of tokens stays in flight long enough to be interrupted). Skips without the
    shared data."""
    corpus = os.path.join(shared_data, "tinyshakespeare", "input.txt")
    if not os.path.exists(corpus):
        skip(f"no {corpus} (the shared datasets)")
    data, run = os.path.join(tmp, "data"), os.path.join(tmp, "run")
    quiet = dict(check=True, stdout=subprocess.DEVNULL)
    subprocess.run([fbt, "prepare", "--input", corpus, "--out", data, "--tokenizer", "byte"], **quiet)
    subprocess.run([fbt, "train", "--config", "debug", "--data", data, "--out", run, "--steps", str(steps),
                    "--set", f"model.context={context}", "--set", "train.batch_size=4",
                    "--set", "train.seq_len=128"], **quiet)
    return run


class Server:
    """`fbt serve --checkpoint RUN --port 0 ARGS...` until stop(): waits for its "listening on" line."""

    LISTENING = re.compile(r"fbt serve: listening on (http://\S+) \(model (\S+)\)")

    def __init__(self, fbt, run, *args, env=None):
        self.proc = subprocess.Popen([fbt, "serve", "--checkpoint", run, "--port", "0", *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.stderr_lines = []
        threading.Thread(target=self._drain_stderr, daemon=True).start()
        line = self.proc.stdout.readline()
        match = self.LISTENING.match(line)
        if not match:
            self.proc.kill()
            raise RuntimeError(f"fbt serve did not start: {line!r}\n{''.join(self.stderr_lines)}")
        self.url, self.model = match.group(1), match.group(2)

    def _drain_stderr(self):
        for line in self.proc.stderr:
            self.stderr_lines.append(line)

    def get(self, path):
        """(status, body text) of GET path."""
        try:
            with urllib.request.urlopen(self.url + path, timeout=30) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def metric(self, name):
        """The value of an unlabelled metric in GET /metrics."""
        _, text = self.get("/metrics")
        match = re.search(rf"^{name} (\S+)$", text, re.M)
        return float(match.group(1))

    def terminate(self, timeout=60):
        """SIGTERM, then the exit status."""
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def wait_for(predicate, timeout=10.0, what="condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")
