"""fbt serve's chat page (GET /) in headless Chromium, driven over the DevTools protocol (cdp.py):
loaded as /?autotest=Hello it sends the message, streams the reply from /v1/chat/completions and
writes it into the page; the page's reply must be the one the API gives for the same conversation
and settings, and the page must show it.

  python3 tests/serve/check_chat_page.py path/to/fbt SHARED_DATA_DIR [SCREENSHOT.png]

Exits 77 (CTest's skip) without Debian's `chromium` or the shared data."""
import json
import os
import shutil
import sys
import tempfile
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cdp import Browser  # noqa: E402
from serve_helpers import Server, make_checkpoint, skip  # noqa: E402

MESSAGE = "Hello"
SETTINGS = {"mode": "soft", "temperature": "0", "max_tokens": "24"}


def api_reply(server):
    body = {"messages": [{"role": "user", "content": MESSAGE}], "fbt_mode": SETTINGS["mode"],
            "temperature": float(SETTINGS["temperature"]), "max_tokens": int(SETTINGS["max_tokens"]),
            "fbt_fused_passes": 1}
    request = urllib.request.Request(server.url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as r:
        return json.load(r)["choices"][0]["message"]["content"]


def main():
    fbt, shared_data = sys.argv[1], sys.argv[2]
    screenshot = sys.argv[3] if len(sys.argv) > 3 else None
    if shutil.which("chromium") is None:
        skip("no chromium (Debian package chromium, scripts/setup.sh)")
    with tempfile.TemporaryDirectory() as tmp:
        server = Server(fbt, make_checkpoint(fbt, shared_data, tmp), "--threads", "1")
        browser = None
        try:
            expected = api_reply(server)
            url = server.url + "/?" + urllib.parse.urlencode(dict(SETTINGS, autotest=MESSAGE))
            browser = Browser(url, os.path.join(tmp, "profile"))
            browser.wait_for('document.title == "fbt-autotest-done"')
            reply = browser.evaluate('document.getElementById("autotest-result").textContent')
            shown = browser.evaluate('[...document.querySelectorAll("#log .msg")].map(m => m.textContent)')
            assert reply == expected, (reply, expected)
            assert shown == [MESSAGE, expected + "soft, finish: length"] or \
                shown == [MESSAGE, expected + "soft, finish: stop"], shown
            print(f"chat page reply == API reply: {expected!r}; the page shows {shown!r}")
            if screenshot:
                browser.screenshot(screenshot)
                print("screenshot:", screenshot)
        finally:
            if browser:
                browser.close()
            server.stop()


if __name__ == "__main__":
    main()
