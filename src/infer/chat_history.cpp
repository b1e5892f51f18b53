// A chat history fitted to the model context, oldest exchange dropped first (see chat_history.h).
#include "fbt/infer/chat_history.h"

#include <algorithm>
#include <string>

#include "fbt/util/error.h"

namespace fbt {

FittedChat fit_chat_history(const ChatTemplate& chat, std::vector<ChatMessage>& messages, int64_t context,
                            int64_t reserve) {
  if (reserve >= context)
    throw Error("a reply of up to " + std::to_string(reserve) + " tokens leaves no room for a prompt in a context of " +
                std::to_string(context) + " tokens");
  const auto is_user = [](const ChatMessage& m) { return m.role == "user"; };
  if (std::none_of(messages.begin(), messages.end(), is_user)) throw Error("a chat prompt needs a user message");
  const int64_t budget = context - reserve;
  const std::ptrdiff_t kept = messages.front().role == "system" ? 1 : 0;  // the system message stays
  FittedChat fitted;
  for (;;) {
    fitted.prompt = chat.render(messages, /*add_generation_prompt=*/true);
    const auto tokens = static_cast<int64_t>(fitted.prompt.ids.size());
    if (tokens <= budget) return fitted;
    // The oldest exchange: from the first droppable message to the next user message after it.
    const auto first = messages.begin() + kept;
    const auto next_user = std::find_if(first + 1, messages.end(), is_user);
    if (next_user == messages.end())
      throw Error("the last message alone (with any system message) is " + std::to_string(tokens) +
                  " tokens as a prompt, but the context of " + std::to_string(context) + " tokens leaves " +
                  std::to_string(budget) + " after room for a reply of " + std::to_string(reserve) + " tokens");
    fitted.dropped += next_user - first;
    messages.erase(first, next_user);
  }
}

}  // namespace fbt
