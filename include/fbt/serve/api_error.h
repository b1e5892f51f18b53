// The errors `fbt serve` answers with, in the shape of the OpenAI API reference ("Error codes"):
// HTTP status + {"error": {"message", "type", "param", "code"}}.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "fbt/util/error.h"

namespace fbt {

/// A request the server refuses. `param` names the request field at fault ("" when none: a body
/// that is not JSON, a missing API key, a full queue); what() is the message.
struct ApiError : Error {
  /// `status`: the HTTP status (400 bad request, 401 unauthorized, 404, 429 queue full, 503
  /// draining, 500 internal); `type`: OpenAI's error type ("invalid_request_error",
  /// "authentication_error", "rate_limit_error", "server_error", ...).
  ApiError(int status, const std::string& message, std::string param = "",
           std::string type = "invalid_request_error")
      : Error(message), status(status), param(std::move(param)), type(std::move(type)) {}
  int status;
  std::string param;
  std::string type;
};

/// A 400 invalid_request_error naming `param`, the message prefixed with it ("temperature: ...").
inline ApiError bad_field(const std::string& param, const std::string& message) {
  return ApiError(400, param + ": " + message, param);
}

/// The response body of `e`: {"error": {"message", "type", "param" (null when empty), "code": null}}.
inline nlohmann::json error_body(const ApiError& e) {
  return {{"error",
           {{"message", e.what()},
            {"type", e.type},
            {"param", e.param.empty() ? nlohmann::json(nullptr) : nlohmann::json(e.param)},
            {"code", nullptr}}}};
}

}  // namespace fbt
