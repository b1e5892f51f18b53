// A chat conversation kept inside the model context: the oldest exchanges are dropped first
// (`fbt chat`).
#pragma once
#include <cstdint>
#include <vector>

#include "fbt/data/chat_template.h"

namespace fbt {

/// The prompt of the next reply and what fitting it cost.
struct FittedChat {
  RenderedChat prompt;  ///< the kept messages rendered with the generation prompt
  int64_t dropped = 0;  ///< messages removed from the front of the history
};

/// Renders `messages` (a leading system message, then user/assistant turns ending with a user
/// message) with the generation prompt. While the rendered prompt plus `reserve` tokens (room for
/// the reply) exceed `context`, removes the oldest exchange from `messages` itself: the first
/// non-system message and every message up to the next user message, so the history still starts
/// with a user turn. The system message and the last user message are always kept.
/// Throws fbt::Error (saying how many tokens are needed and available) if those alone do not fit,
/// and if reserve >= context or `messages` holds no user message.
FittedChat fit_chat_history(const ChatTemplate& chat, std::vector<ChatMessage>& messages, int64_t context,
                            int64_t reserve);

}  // namespace fbt
