// GET / of `fbt serve`: a one-page chat client (plain HTML and JavaScript, no build step) that
// streams replies from /v1/chat/completions.
#pragma once
#include <string>

namespace fbt {

/// The page: a conversation, a decoding-mode selector (standard / soft / fused), a temperature
/// field and an optional API key; replies stream through fetch() + ReadableStream with stream=true.
/// Loaded as /?autotest=TEXT it sends TEXT once by itself and, when the reply has ended, sets
/// document.title to "fbt-autotest-done" and writes the reply into #autotest-result (for headless
/// browser tests).
const std::string& chat_page_html();

}  // namespace fbt
