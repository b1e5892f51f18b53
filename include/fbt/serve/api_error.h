// The errors `fbt serve` answers with, in the shape of the OpenAI API reference ("Error codes"):
// HTTP status + {"error": {"message", "type", "param", "code"}}; `code` is a machine-readable
// string where OpenAI defines one (e.g. "model_not_found" with 404 for an unknown model), else null.
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
  /// "authentication_error", "rate_limit_error", "server_error", ...); `code`: OpenAI's error code
  /// ("model_not_found", ...), "" for none (null in the body).
  ApiError(int status, const std::string& message, std::string param = "", std::string type = "invalid_request_error",
           std::string code = "")
      : Error(message), status(status), param(std::move(param)), type(std::move(type)), code(std::move(code)) {}
  int status;
  std::string param;
  std::string type;
  std::string code;
};

/// A 400 invalid_request_error naming `param`, the message prefixed with it ("temperature: ...").
inline ApiError bad_field(const std::string& param, const std::string& message) {
  return ApiError(400, param + ": " + message, param);
}

/// The response body of `e`: {"error": {"message", "type", "param", "code"}} (param and code null
/// when empty).
inline nlohmann::json error_body(const ApiError& e) {
  return {{"error",
           {{"message", e.what()},
            {"type", e.type},
            {"param", e.param.empty() ? nlohmann::json(nullptr) : nlohmann::json(e.param)},
            {"code", e.code.empty() ? nlohmann::json(nullptr) : nlohmann::json(e.code)}}}};
}

}  // namespace fbt
