// The chat page of `fbt serve` (see chat_page.h), embedded as one raw string.
#include "fbt/serve/chat_page.h"

namespace fbt {

const std::string& chat_page_html() {
  static const std::string page = R"FBTPAGE(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>fbt chat</title>
<style>
  body { font-family: system-ui, sans-serif; margin: 0; background: #f4f4f6; color: #1d1d22; }
  header { display: flex; gap: 1em; align-items: center; flex-wrap: wrap; padding: .6em 1em;
           background: #23233a; color: #fff; }
  header h1 { font-size: 1.1em; margin: 0 1em 0 0; }
  header label { font-size: .9em; }
  header input, header select { margin-left: .3em; }
  #log { max-width: 52em; margin: 1em auto; padding: 0 1em 7em; }
  .msg { margin: .6em 0; padding: .6em .9em; border-radius: .6em; white-space: pre-wrap; line-height: 1.4; }
  .user { background: #d9e6ff; margin-left: 20%; }
  .assistant { background: #fff; margin-right: 20%; border: 1px solid #ddd; }
  .meta { font-size: .75em; color: #777; margin-top: .3em; }
  .error { background: #ffe0e0; }
  form { position: fixed; bottom: 0; left: 0; right: 0; display: flex; gap: .5em; padding: .8em 1em;
         background: #fff; border-top: 1px solid #ccc; }
  #input { flex: 1; font-size: 1em; padding: .5em; }
  button { font-size: 1em; padding: .5em 1em; }
</style>
</head>
<body>
<header>
  <h1>fbt chat</h1>
  <label>mode <select id="mode">
    <option value="standard">standard</option><option value="soft">soft</option><option value="fused">fused</option>
  </select></label>
  <label>fused passes <input id="passes" type="number" min="1" max="64" value="1" style="width:3.5em"></label>
  <label>temperature <input id="temperature" type="number" min="0" max="2" step="0.1" value="0.7" style="width:4.5em"></label>
  <label>max tokens <input id="max-tokens" type="number" min="1" value="128" style="width:5em"></label>
  <label>API key <input id="key" type="password" style="width:8em"></label>
  <button id="reset" type="button">New chat</button>
</header>
<div id="log"></div>
<div id="autotest-result" hidden></div>
<form id="form"><input id="input" autocomplete="off" placeholder="Message"><button id="send">Send</button></form>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
let messages = [];
$("key").value = localStorage.getItem("fbt-key") || "";
$("key").onchange = () => localStorage.setItem("fbt-key", $("key").value);
$("reset").onclick = () => { messages = []; $("log").textContent = ""; };

function bubble(role, text) {
  const div = document.createElement("div");
  div.className = "msg " + role;
  div.textContent = text;
  $("log").appendChild(div);
  div.scrollIntoView();
  return div;
}

// Reads the server-sent events of a streamed chat completion; calls onDelta with each piece of text.
async function readStream(response, onDelta) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "", finish = null, mode = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      for (const line of event.split("\n")) {
        if (!line.startsWith("data: ") || line === "data: [DONE]") continue;
        const chunk = JSON.parse(line.slice(6));
        mode = chunk.fbt_mode || mode;
        for (const choice of chunk.choices) {
          if (choice.delta && choice.delta.content) onDelta(choice.delta.content);
          if (choice.finish_reason) finish = choice.finish_reason;
        }
      }
    }
  }
  return { finish, mode };
}

async function send(text) {
  messages.push({ role: "user", content: text });
  bubble("user", text);
  const out = bubble("assistant", "");
  const body = {
    messages, stream: true, fbt_mode: $("mode").value, fbt_fused_passes: Number($("passes").value),
    temperature: Number($("temperature").value), max_tokens: Number($("max-tokens").value),
  };
  const headers = { "Content-Type": "application/json" };
  if ($("key").value) headers["Authorization"] = "Bearer " + $("key").value;
  let reply = "";
  try {
    const response = await fetch("/v1/chat/completions", { method: "POST", headers, body: JSON.stringify(body) });
    if (!response.ok) throw new Error((await response.json()).error.message);
    const { finish, mode } = await readStream(response, (piece) => { reply += piece; out.textContent = reply; });
    const meta = document.createElement("div");
    meta.className = "meta";
    meta.textContent = mode + ", finish: " + finish;
    out.appendChild(meta);
    messages.push({ role: "assistant", content: reply });
  } catch (err) {
    out.className = "msg error";
    out.textContent = "error: " + err.message;
    messages.pop();
    reply = "error: " + err.message;
  }
  return reply;
}

$("form").onsubmit = (e) => {
  e.preventDefault();
  const text = $("input").value.trim();
  if (!text) return;
  $("input").value = "";
  send(text);
};

const params = new URLSearchParams(location.search);
if (params.has("autotest")) {
  if (params.has("mode")) $("mode").value = params.get("mode");
  if (params.has("temperature")) $("temperature").value = params.get("temperature");
  if (params.has("max_tokens")) $("max-tokens").value = params.get("max_tokens");
  send(params.get("autotest")).then((reply) => {
    $("autotest-result").textContent = reply;
    document.title = "fbt-autotest-done";
  });
}
</script>
</body>
</html>
)FBTPAGE";
  return page;
}

}  // namespace fbt
