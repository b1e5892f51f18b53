"""fbt serve through the `openai` Python package (issue 19): completions and chat, streamed and not,
every decoding mode, echo + logprobs, the error statuses, a client leaving mid-stream, SIGTERM.

  .venv/bin/python tests/serve/check_openai_client.py path/to/fbt SHARED_DATA_DIR

The expected values are worked out apart from the server: greedy completions are `fbt generate
--temperature 0` on the same prompt; echo log-probabilities are the PyTorch reference model's
(bench/reference/fbt_ref.py) on the checkpoint's weights; chat prompts are rendered by hand in
fbt's native template. Exits 77 (CTest's skip) without the `openai` package or the shared data.
"""
import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from serve_helpers import Server, make_checkpoint, skip, wait_for  # noqa: E402

try:
    import openai
    import torch
except ImportError as e:
    skip(e)
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench", "reference"))
import fbt_ref  # noqa: E402

EOS = 258  # the byte tokenizer's EOS, the document prefix of a text prompt
KEY = "test-key"
PROMPT = "ROMEO:\nWhat light"
MODES = {"standard": "standard", "soft": "soft", "fused": "fused(1)"}


def fbt_generate(fbt, run, prompt, mode, max_new):
    out = subprocess.run([fbt, "generate", "--checkpoint", run, "--prompt", prompt, "--mode", mode,
                          "--temperature", "0", "--max-new-tokens", str(max_new)],
                         check=True, capture_output=True, text=True)
    return out.stdout[:-1]  # generate ends the text with a newline


def reference_logprobs(model, tokens, passes):
    """log p(tokens[t] | tokens[<t]) for t >= 1 after `passes` passes of the K-pass forward (1 =
    standard; k+1 = fused(k)), computed by the PyTorch reference."""
    x = torch.tensor([tokens])
    with torch.no_grad():
        e_n = model.plain_input(x)
        plain = model.plain_positions(x)
        u, state = e_n, None
        for k in range(passes):
            if k > 0:
                u = torch.where(plain.unsqueeze(-1), e_n, model.fused_input(fbt_ref.shift_right(state), e_n))
            h = model.stack(u)
            state = model.feedback_state(h)
        logp = torch.log_softmax(model.head(h)[0].double(), -1)
    return [logp[t - 1, tokens[t]].item() for t in range(1, len(tokens))]


def check_completions(fbt, run, client):
    for mode, label in MODES.items():
        r = client.completions.create(model="x", prompt=PROMPT, max_tokens=12, temperature=0,
                                      extra_body={"fbt_mode": mode})
        expected = fbt_generate(fbt, run, PROMPT, mode, 12)
        assert r.choices[0].text == expected, (mode, r.choices[0].text, expected)
        assert r.model_extra["fbt_mode"] == label, r.model_extra
        assert r.usage.prompt_tokens == 1 + len(PROMPT.encode()), r.usage
        assert r.usage.completion_tokens == len(expected.encode()), (r.usage, expected)
        print(f"completion [{label}] == fbt generate: {expected!r}")
    # A list of prompts with n = 2: choice p*2 + i is prompt p sampled with seed + i, as alone.
    prompts = ["First Citizen:", "KING"]
    sampling = dict(max_tokens=8, temperature=0.9, seed=11)
    r = client.completions.create(model="x", prompt=prompts, n=2, **sampling)
    assert [c.index for c in r.choices] == [0, 1, 2, 3]
    for c in r.choices:
        alone = client.completions.create(model="x", prompt=prompts[c.index // 2],
                                          **dict(sampling, seed=11 + c.index % 2))
        assert c.text == alone.choices[0].text, (c.index, c.text, alone.choices[0].text)
    again = client.completions.create(model="x", prompt=prompts, n=2, **sampling)
    assert [c.text for c in again.choices] == [c.text for c in r.choices]
    # Token-id prompts: the same as the text with its document prefix.
    ids = client.completions.create(model="x", prompt=[EOS] + list(PROMPT.encode()), max_tokens=12, temperature=0)
    assert ids.choices[0].text == fbt_generate(fbt, run, PROMPT, "standard", 12)
    print("lists, n=2, seeds: each choice equals its prompt alone with seed + i; repeated requests agree")


def check_ignore_eos(client):
    """ignore_eos: the same samples as without it (same seed) up to where end-of-text ended them,
    then on to max_tokens: finish_reason "length" and exactly max_tokens completion tokens."""
    sampling = dict(model="x", prompt=PROMPT, max_tokens=24, temperature=1)
    stopped = 0
    for seed in range(6):
        plain = client.completions.create(**sampling, seed=seed)
        r = client.completions.create(**sampling, seed=seed, extra_body={"ignore_eos": True})
        assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 24, (seed, r)
        assert r.choices[0].text.startswith(plain.choices[0].text), (seed, plain.choices[0].text, r.choices[0].text)
        stopped += plain.choices[0].finish_reason == "stop"
    print(f"ignore_eos: 6 seeds run to max_tokens, each continuing its plain sample ({stopped} of which ended at EOS)")


def check_stop(client):
    sampling = dict(model="x", prompt=PROMPT, max_tokens=24, temperature=1, seed=2)
    whole = client.completions.create(**sampling).choices[0].text
    stop = whole[5:7]
    cut = whole.find(stop)
    r = client.completions.create(**sampling, stop=[stop, "\x00never"])
    assert r.choices[0].text == whole[:cut] and r.choices[0].finish_reason == "stop", (r.choices[0], stop)
    chunks = list(client.completions.create(**sampling, stop=stop, stream=True))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == whole[:cut]
    assert chunks[-1].choices[0].finish_reason == "stop"
    print(f"stop {stop!r} in {whole!r}: text cut to {whole[:cut]!r}, finish_reason stop (streamed too)")


def check_echo(run, client):
    model = fbt_ref.load_model(run)
    tokens = [EOS] + list(PROMPT.encode())
    for mode, passes in [("standard", 1), ("fused", 2)]:
        r = client.completions.create(model="x", prompt=PROMPT, max_tokens=0, echo=True, logprobs=1,
                                      extra_body={"fbt_mode": mode})
        lp = r.choices[0].logprobs
        assert r.choices[0].text == PROMPT
        assert lp.tokens == [""] + list(PROMPT), lp.tokens
        assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
        assert lp.text_offset == [0] + list(range(len(PROMPT))), lp.text_offset  # EOS decodes to ""
        expected = reference_logprobs(model, tokens, passes)
        worst = max(abs(a - b) for a, b in zip(lp.token_logprobs[1:], expected))
        assert worst < 1e-4, (mode, worst)
        for top, chosen in zip(lp.top_logprobs[1:], lp.token_logprobs[1:]):
            assert len(top) == 1 and max(top.values()) >= chosen - 1e-6
        print(f"echo logprobs [{mode}]: max |server - reference| = {worst:.2e} over {len(expected)} tokens")
    # Echo with generation: the prompt's entries, then the generated tokens' (greedy: their logprob
    # is the top one, and it equals the reference's on the whole text in the standard mode).
    r = client.completions.create(model="x", prompt=PROMPT, max_tokens=6, echo=True, logprobs=2, temperature=0)
    c = r.choices[0]
    generated = c.text[len(PROMPT):]
    assert c.text.startswith(PROMPT) and len(c.logprobs.tokens) == 1 + len(PROMPT) + len(generated.encode())
    whole = reference_logprobs(model, tokens + list(generated.encode()), 1)
    tail = c.logprobs.token_logprobs[len(tokens):]
    assert max(abs(a - b) for a, b in zip(tail, whole[len(tokens) - 1:])) < 1e-4, (tail, whole)
    assert all(abs(max(t.values()) - v) < 1e-6 for t, v in zip(c.logprobs.top_logprobs[len(tokens):], tail))
    print("echo + generation: generated tokens' logprobs equal the reference's; greedy = top-1")
    # Byte fragments of Japanese and emoji all decode to U+FFFD alone: every top_logprobs object
    # still has logprobs=5 distinct entries, and each chosen token is among them (issue 36).
    r = client.completions.create(model="x", prompt="日本語と😀", max_tokens=0, echo=True, logprobs=5)
    lp = r.choices[0].logprobs
    assert all(len(top) == 5 for top in lp.top_logprobs[1:]), lp.top_logprobs
    assert all(tok in top or lp_ < min(top.values()) for tok, top, lp_ in
               zip(lp.tokens[1:], lp.top_logprobs[1:], lp.token_logprobs[1:])), lp.tokens
    print("top_logprobs: 5 distinct entries at each of", len(lp.tokens) - 1, "byte-fragment positions")


def check_chat(client, fbt, run):
    messages = [{"role": "user", "content": "Hello"}]
    rendered = [EOS] + list(b"User: Hello\n\nAssistant: ")  # fbt's native template, by hand
    for mode, label in MODES.items():
        r = client.chat.completions.create(model="x", messages=messages, max_tokens=10, temperature=0,
                                           extra_body={"fbt_mode": mode})
        same = client.completions.create(model="x", prompt=rendered, max_tokens=10, temperature=0,
                                         extra_body={"fbt_mode": mode})
        assert r.choices[0].message.content == same.choices[0].text, (mode, r.choices[0], same.choices[0])
        assert r.choices[0].message.role == "assistant" and r.model_extra["fbt_mode"] == label
        assert r.usage.prompt_tokens == len(rendered)
        stream = client.chat.completions.create(model="x", messages=messages, max_tokens=10, temperature=0,
                                                stream=True, stream_options={"include_usage": True},
                                                extra_body={"fbt_mode": mode})
        chunks = list(stream)
        assert chunks[0].choices[0].delta.role == "assistant"
        content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert content == r.choices[0].message.content, (content, r.choices[0].message.content)
        assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == r.choices[0].finish_reason
        assert chunks[-1].usage.completion_tokens == r.usage.completion_tokens
        print(f"chat [{label}]: {content!r} (streamed == whole == completion of the rendered template)")
    streamed = client.completions.create(model="x", prompt=PROMPT, max_tokens=12, temperature=0, stream=True,
                                         extra_body={"fbt_mode": "soft"})
    assert "".join(c.choices[0].text for c in streamed) == fbt_generate(fbt, run, PROMPT, "soft", 12)
    print("streamed completion [soft] == fbt generate")


def raw_post(url, path, body, key=KEY):
    """(status, headers, body) of POST path with `body`; key None sends no Authorization header."""
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    request = urllib.request.Request(url + path, data=body.encode(), method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()


def check_errors(server, client):
    cases = [(dict(extra_body={"fbt_mode": "turbo"}), "fbt_mode"), (dict(max_tokens=-1), "max_tokens"),
             (dict(n=0), "n"), (dict(temperature=5), "temperature"), (dict(logprobs=99), "logprobs"),
             (dict(prompt="x" * 5000), "prompt")]
    for kwargs, param in cases:
        args = dict(dict(model="x", prompt="a", max_tokens=2), **kwargs)
        try:
            client.completions.create(**args)
            raise AssertionError(f"accepted {kwargs}")
        except openai.BadRequestError as e:
            assert e.status_code == 400 and e.body["param"] == param, (kwargs, e.body)
            assert e.body["type"] == "invalid_request_error"
    # A model the server does not serve (issue 36; cf. vLLM #3486): 404 model_not_found, both endpoints.
    for create, kwargs in [(client.completions.create, dict(prompt="a", max_tokens=2)),
                           (client.chat.completions.create, dict(messages=[{"role": "user", "content": "a"}]))]:
        try:
            create(model="gpt-4-does-not-exist", **kwargs)
            raise AssertionError("answered a request for gpt-4-does-not-exist")
        except openai.NotFoundError as e:
            assert e.status_code == 404 and e.body["code"] == "model_not_found", e.body
            assert e.body["type"] == "invalid_request_error" and "'x'" in e.body["message"], e.body
    status, _, body = raw_post(server.url, "/v1/completions", '{"prompt": "a", ')
    assert status == 400 and "not valid JSON" in json.loads(body)["error"]["message"], body
    status, _, body = raw_post(server.url, "/v1/chat/completions", '{"messages": [{"role": "robot", "content": "x"}]}')
    assert status == 400 and json.loads(body)["error"]["param"] == "messages", body
    bad = openai.OpenAI(base_url=server.url + "/v1", api_key="wrong", max_retries=0)
    try:
        bad.models.list()
        raise AssertionError("accepted a wrong API key")
    except openai.AuthenticationError as e:
        assert e.status_code == 401 and e.body["type"] == "authentication_error", e.body
    status, _, body = raw_post(server.url, "/v1/completions", '{"prompt": "a"}', key=None)
    assert status == 401, (status, body)
    assert server.get("/health") == (200, '{"status":"ok"}')
    assert [m.id for m in client.models.list().data] == [server.model]
    # n beyond --max-batch 2 + --max-queue 4: the queue fills mid-request -> 429 with Retry-After.
    status, headers, body = raw_post(server.url, "/v1/completions", '{"prompt": "a", "max_tokens": 50, "n": 16}')
    assert status == 429 and headers.get("Retry-After") == "1", (status, headers, body)
    wait_for(lambda: server.metric("fbt_active_sequences") == 0 and server.metric("fbt_queue_length") == 0,
             what="the refused request's sequences to be cancelled")
    print("400 naming the field (mode, max_tokens, n, temperature, logprobs, long prompt, JSON, messages), "
          "404 model_not_found, 401 (wrong and missing key), 429 + Retry-After")


def check_disconnect(server):
    before = server.metric("fbt_generated_tokens_total")
    body = json.dumps({"prompt": "a", "max_tokens": 4000, "temperature": 1, "seed": 3, "stream": True})
    request = urllib.request.Request(server.url + "/v1/completions", data=body.encode(), method="POST",
                                     headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"})
    response = urllib.request.urlopen(request, timeout=30)
    assert response.readline().startswith(b"data: ")  # the first token is here: the sequence decodes
    response.close()  # the client goes away mid-stream
    wait_for(lambda: server.metric("fbt_active_sequences") == 0, timeout=5, what="the slot to be freed")
    generated = server.metric("fbt_generated_tokens_total") - before
    assert generated < 4000, generated
    print(f"client gone mid-stream: slot freed, {generated:.0f} of 4000 tokens generated")

    # A non-streamed request whose client goes away (issue 36; cf. llama.cpp #24496): its sequence
    # is cancelled too, and the next client is answered about as fast as alone.
    def timed_request():
        t0 = time.monotonic()
        status, _, _ = raw_post(server.url, "/v1/completions", json.dumps({"prompt": "a", "max_tokens": 64,
                                                                           "temperature": 0}))
        assert status == 200, status
        return time.monotonic() - t0
    solo = min(timed_request() for _ in range(3))
    before = server.metric("fbt_generated_tokens_total")
    host, port = server.url[len("http://"):].rsplit(":", 1)
    body = json.dumps({"prompt": "a", "max_tokens": 4000, "temperature": 0}).encode()  # greedy: no early EOS
    sock = socket.create_connection((host, int(port)), timeout=30)
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 + f"Authorization: Bearer {KEY}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
    wait_for(lambda: server.metric("fbt_generated_tokens_total") > before, timeout=10, what="the request to decode")
    sock.close()  # the client goes away before its answer
    wait_for(lambda: server.metric("fbt_active_sequences") == 0, timeout=5, what="the abandoned request's slot")
    generated = server.metric("fbt_generated_tokens_total") - before
    assert generated < 4000, generated
    after = timed_request()
    assert after < 3 * solo + 1.0, (after, solo)
    print(f"client gone before a non-streamed answer: slot freed, {generated:.0f} of 4000 tokens generated; "
          f"next request {after:.2f} s (alone {solo:.2f} s)")


def check_sigterm(server):
    result = {}
    client = openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0)
    started = threading.Event()

    def long_request():
        stream = client.completions.create(model="x", prompt="a", max_tokens=2000, temperature=1, seed=5, stream=True)
        text, finish = "", None
        for chunk in stream:
            started.set()
            text += chunk.choices[0].text
            finish = chunk.choices[0].finish_reason or finish
        result.update(text=text, finish=finish)

    thread = threading.Thread(target=long_request)
    thread.start()
    started.wait(30)
    status = server.terminate()
    thread.join(30)
    assert status == 0, (status, "".join(server.stderr_lines))
    assert result.get("finish") in ("length", "stop"), result
    print(f"SIGTERM mid-request: the request finished ({result['finish']}, {len(result['text'])} chars), exit 0")


def main():
    fbt, shared_data = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as tmp:
        run = make_checkpoint(fbt, shared_data, tmp)
        server = Server(fbt, run, "--api-key", KEY, "--max-batch", "2", "--max-queue", "4", "--threads", "1",
                        "--model-name", "x")
        try:
            client = openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0)
            check_completions(fbt, run, client)
            check_stop(client)
            check_ignore_eos(client)
            check_echo(run, client)
            check_chat(client, fbt, run)
            check_errors(server, client)
            check_disconnect(server)
            check_sigterm(server)
        finally:
            server.stop()
    print("openai", openai.__version__, "ok")


if __name__ == "__main__":
    main()
