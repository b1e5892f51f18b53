// bf16 autocast scope across libtorch versions (1.13: per-backend setters; 2.4+: per device type).
#include "fbt/model/precision.h"

#include <ATen/autocast_mode.h>
#include <torch/version.h>

namespace fbt {

template <>
const EnumNames<Precision>& enum_names<Precision>() {
  static const EnumNames<Precision> names{
      {Precision::Auto, "auto"}, {Precision::FP32, "fp32"}, {Precision::BF16, "bf16"}};
  return names;
}

namespace {

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
bool is_enabled(torch::DeviceType t) { return at::autocast::is_autocast_enabled(t); }
void set_enabled(torch::DeviceType t, bool on) { at::autocast::set_autocast_enabled(t, on); }
at::ScalarType get_dtype(torch::DeviceType t) { return at::autocast::get_autocast_dtype(t); }
void set_dtype(torch::DeviceType t, at::ScalarType d) { at::autocast::set_autocast_dtype(t, d); }
#else
bool is_enabled(torch::DeviceType t) {
  return t == torch::kCUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
}
void set_enabled(torch::DeviceType t, bool on) {
  t == torch::kCUDA ? at::autocast::set_enabled(on) : at::autocast::set_cpu_enabled(on);
}
at::ScalarType get_dtype(torch::DeviceType t) {
  return t == torch::kCUDA ? at::autocast::get_autocast_gpu_dtype() : at::autocast::get_autocast_cpu_dtype();
}
void set_dtype(torch::DeviceType t, at::ScalarType d) {
  t == torch::kCUDA ? at::autocast::set_autocast_gpu_dtype(d) : at::autocast::set_autocast_cpu_dtype(d);
}
#endif

}  // namespace

bool uses_bf16_autocast(Precision precision, const torch::Device& device) {
  return precision == Precision::BF16 || (precision == Precision::Auto && device.is_cuda());
}

AutocastScope::AutocastScope(Precision precision, const torch::Device& device)
    : active_(uses_bf16_autocast(precision, device) && (device.is_cuda() || device.is_cpu())), type_(device.type()) {
  if (!active_) return;
  was_enabled_ = is_enabled(type_);
  old_dtype_ = get_dtype(type_);
  set_dtype(type_, at::kBFloat16);
  set_enabled(type_, true);
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (!active_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  set_enabled(type_, was_enabled_);
  set_dtype(type_, old_dtype_);
}

}  // namespace fbt
