// msrl's C-ABI shim over MindSpore Lite's C++ API (mindspore::Model, mindspore::Converter).
//
// Lite's Python module is built for one CPython (2.0.0 on PyPI: 3.7 only); its C++ libraries
// serve any Python through this shim and ctypes (msrl_consistent/deploy/lite.py). Built by
// `msrl lite install` against the wheel's headers with the libraries' old libstdc++ ABI
// (-D_GLIBCXX_USE_CXX11_ABI=0); strings cross Lite's boundary as std::vector<char>
// (include/api/dual_abi_helper.h), so only the char-vector entry points are called.
//
// Every handle handed in is looked up in the set of live handles, every pointer is checked
// for NULL, every index against the model's input/output count and every byte count against
// the tensor's own size before anything is read or written. Errors return a negative code
// and a NUL-terminated message in the caller's buffer (truncated to its length).
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "include/api/context.h"
#include "include/api/model.h"
#include "include/api/status.h"
#include "include/api/types.h"
#include "include/registry/converter_context.h"

namespace mindspore {
// Lite 2.0.0's libmindspore_converter.so exports these members of mindspore::Converter; no header
// for them ships in the wheel. The layout is one shared_ptr (include/converter.h of the r2.0 sources).
struct ConverterPara;
class Converter {
 public:
  Converter();
  ~Converter() = default;
  void SetConfigFile(const std::vector<char> &config_file);
  void SetSaveType(ModelType save_type);
  void SetWeightFp16(bool weight_fp16);
  void SetDevice(const std::vector<char> &device);
  void SetNoFusion(bool no_fusion);
  Status Convert(converter::FmkType fmk_type, const std::vector<char> &model_file,
                 const std::vector<char> &output_file, const std::vector<char> &weight_file);

 private:
  std::shared_ptr<ConverterPara> data_;
};
}  // namespace mindspore

namespace {
constexpr int kAbiVersion = 2;  // deploy/lite.py SHIM_ABI: raised with every signature change
constexpr int kMaxDims = 8;
constexpr int64_t kMaxElements = int64_t(1) << 40;

struct Handle {
  mindspore::Model model;
  std::vector<mindspore::MSTensor> inputs;
  std::vector<mindspore::MSTensor> outputs;
};

std::mutex g_mutex;
std::set<Handle *> g_live;

int fail(char *err, size_t errlen, const std::string &msg, int code = -1) {
  if (err != nullptr && errlen > 0) {
    size_t n = msg.size() < errlen - 1 ? msg.size() : errlen - 1;
    std::memcpy(err, msg.data(), n);
    err[n] = '\0';
  }
  return code;
}

std::vector<char> chars(const char *s) { return std::vector<char>(s, s + std::strlen(s)); }

Handle *live(void *h) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto *p = static_cast<Handle *>(h);
  return g_live.count(p) ? p : nullptr;
}

std::vector<mindspore::MSTensor> *tensors(Handle *h, int outputs) { return outputs ? &h->outputs : &h->inputs; }
}  // namespace

extern "C" {

int msrl_lite_abi_version(void) { return kAbiVersion; }

// Lite's own version string ("MindSpore Lite 2.0.0") into buf.
int msrl_lite_version(char *buf, size_t buflen) {
  if (buf == nullptr || buflen == 0) return -1;
  try {
    return fail(buf, buflen, mindspore::Version(), 0);
  } catch (const std::exception &e) {
    return fail(buf, buflen, e.what());
  }
}

// Build the model file for target "cpu" or "ascend" (Ascend first, the CPU as Lite's fallback for
// what Ascend does not run, as Lite's Python API does). precision_mode is always given: on the CPU
// "enforce_fp32" or "preferred_fp16", on Ascend one of Lite's five modes (passed through).
// affinity: Lite's thread affinity mode (0 none, 1 big cores, 2 little cores first).
void *msrl_lite_open(const char *path, const char *target, int device_id, const char *precision_mode, int threads,
                     int affinity, char *err, size_t errlen) {
  if (path == nullptr || target == nullptr || precision_mode == nullptr) {
    fail(err, errlen, "msrl_lite_open: NULL argument");
    return nullptr;
  }
  if (threads < 1 || threads > 1024 || device_id < 0 || affinity < 0 || affinity > 2) {
    fail(err, errlen, "msrl_lite_open: threads must be 1..1024, device_id >= 0, affinity 0..2");
    return nullptr;
  }
  std::string tgt(target), mode(precision_mode);
  if (tgt != "cpu" && tgt != "ascend") {
    fail(err, errlen, "msrl_lite_open: target must be 'cpu' or 'ascend', got '" + tgt + "'");
    return nullptr;
  }
  try {
    auto context = std::make_shared<mindspore::Context>();
    context->SetThreadNum(threads);
    // Lite 2.0's CPU runtime runs each Predict on an actor thread of its own while the caller waits;
    // unbound, the two may land on different cores and a call pays two cross-core wake-ups. Affinity
    // 2 binds them to one core and pins the calling thread for good: the caller decides (a process of
    // its own pins, a user's process does not). Times: docs/benchmarks.md, "MindSpore Lite".
    if (affinity != 0) context->SetThreadAffinity(affinity);
    auto &devices = context->MutableDeviceInfo();
    if (tgt == "ascend") {
      auto ascend = std::make_shared<mindspore::AscendDeviceInfo>();
      ascend->SetDeviceID(static_cast<uint32_t>(device_id));
      ascend->SetPrecisionMode(mode);
      devices.push_back(ascend);
    } else if (mode != "enforce_fp32" && mode != "preferred_fp16") {
      fail(err, errlen, "msrl_lite_open: cpu precision_mode must be enforce_fp32 or preferred_fp16, got '" + mode + "'");
      return nullptr;
    }
    auto cpu = std::make_shared<mindspore::CPUDeviceInfo>();
    cpu->SetEnableFP16(tgt == "cpu" && mode == "preferred_fp16");
    devices.push_back(cpu);
    std::unique_ptr<Handle> h(new Handle());
    mindspore::Status st = h->model.Build(std::string(path), mindspore::kMindIR, context);
    if (!st.IsOk()) {
      fail(err, errlen, "Build: " + st.ToString());
      return nullptr;
    }
    h->inputs = h->model.GetInputs();
    std::lock_guard<std::mutex> lock(g_mutex);
    g_live.insert(h.get());
    return h.release();
  } catch (const std::exception &e) {
    fail(err, errlen, std::string("msrl_lite_open: ") + e.what());
  } catch (...) {
    fail(err, errlen, "msrl_lite_open: unknown C++ exception");
  }
  return nullptr;
}

int msrl_lite_close(void *handle) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto *h = static_cast<Handle *>(handle);
  if (!g_live.erase(h)) return -1;
  delete h;
  return 0;
}

// The number of inputs (outputs != 0: of outputs after the last predict).
int msrl_lite_count(void *handle, int outputs) {
  Handle *h = live(handle);
  return h ? static_cast<int>(tensors(h, outputs)->size()) : -1;
}

// One tensor's dtype (MindSpore's DataType code), shape and name; returns its rank.
int msrl_lite_info(void *handle, int outputs, int index, int *dtype, int64_t *shape, int max_dims, char *name,
                   size_t namelen) {
  Handle *h = live(handle);
  if (h == nullptr || dtype == nullptr || shape == nullptr || max_dims < 0) return -1;
  auto *ts = tensors(h, outputs);
  if (index < 0 || index >= static_cast<int>(ts->size())) return -1;
  auto &t = (*ts)[index];
  const std::vector<int64_t> &dims = t.Shape();
  if (static_cast<int>(dims.size()) > max_dims) return -1;
  *dtype = static_cast<int>(t.DataType());
  for (size_t i = 0; i < dims.size(); ++i) shape[i] = dims[i];
  if (name != nullptr && namelen > 0) {
    fail(name, namelen, t.Name(), 0);
  }
  return static_cast<int>(dims.size());
}

// Resize every input: n inputs, ranks[i] dims each, dims flattened in input order.
int msrl_lite_resize(void *handle, int n, const int *ranks, const int64_t *dims, char *err, size_t errlen) {
  Handle *h = live(handle);
  if (h == nullptr) return fail(err, errlen, "msrl_lite_resize: not a live model handle");
  if (ranks == nullptr || dims == nullptr) return fail(err, errlen, "msrl_lite_resize: NULL argument");
  if (n != static_cast<int>(h->inputs.size()))
    return fail(err, errlen, "msrl_lite_resize: " + std::to_string(n) + " shapes for " +
                                 std::to_string(h->inputs.size()) + " inputs");
  std::vector<std::vector<int64_t>> shapes;
  size_t at = 0;
  for (int i = 0; i < n; ++i) {
    if (ranks[i] < 0 || ranks[i] > kMaxDims) return fail(err, errlen, "msrl_lite_resize: rank out of range");
    std::vector<int64_t> s(dims + at, dims + at + ranks[i]);
    at += ranks[i];
    int64_t count = 1;
    for (int64_t d : s) {
      if (d < 0 || (d > 0 && count > kMaxElements / d)) return fail(err, errlen, "msrl_lite_resize: bad dimension");
      count *= d;
    }
    shapes.push_back(s);
  }
  try {
    mindspore::Status st = h->model.Resize(h->inputs, shapes);
    if (!st.IsOk()) {
      return fail(err, errlen, "Resize: " + st.ToString());
    }
    h->inputs = h->model.GetInputs();
  } catch (const std::exception &e) {
    return fail(err, errlen, std::string("msrl_lite_resize: ") + e.what());
  }
  return 0;
}

// Copy nbytes from data into input `index`, whose dtype and byte size must match.
int msrl_lite_set_input(void *handle, int index, int dtype, const void *data, size_t nbytes, char *err,
                        size_t errlen) {
  Handle *h = live(handle);
  if (h == nullptr) return fail(err, errlen, "msrl_lite_set_input: not a live model handle");
  if (data == nullptr) return fail(err, errlen, "msrl_lite_set_input: NULL data");
  if (index < 0 || index >= static_cast<int>(h->inputs.size()))
    return fail(err, errlen, "msrl_lite_set_input: no input " + std::to_string(index));
  auto &t = h->inputs[index];
  if (static_cast<int>(t.DataType()) != dtype)
    return fail(err, errlen, "msrl_lite_set_input: input " + std::to_string(index) + " has dtype code " +
                                 std::to_string(static_cast<int>(t.DataType())) + ", given " + std::to_string(dtype));
  if (t.DataSize() != nbytes)
    return fail(err, errlen, "msrl_lite_set_input: input " + std::to_string(index) + " holds " +
                                 std::to_string(t.DataSize()) + " bytes, given " + std::to_string(nbytes));
  void *dst = t.MutableData();
  if (dst == nullptr && nbytes > 0) return fail(err, errlen, "msrl_lite_set_input: Lite gave no buffer");
  if (nbytes > 0) std::memcpy(dst, data, nbytes);
  return 0;
}

int msrl_lite_predict(void *handle, char *err, size_t errlen) {
  Handle *h = live(handle);
  if (h == nullptr) return fail(err, errlen, "msrl_lite_predict: not a live model handle");
  try {
    h->outputs.clear();
    mindspore::Status st = h->model.Predict(h->inputs, &h->outputs);
    if (!st.IsOk()) {
      return fail(err, errlen, "Predict: " + st.ToString());
    }
  } catch (const std::exception &e) {
    return fail(err, errlen, std::string("msrl_lite_predict: ") + e.what());
  }
  return static_cast<int>(h->outputs.size());
}

// Copy output `index` of the last predict into dst, whose size must equal the output's.
int msrl_lite_get_output(void *handle, int index, void *dst, size_t nbytes, char *err, size_t errlen) {
  Handle *h = live(handle);
  if (h == nullptr) return fail(err, errlen, "msrl_lite_get_output: not a live model handle");
  if (dst == nullptr) return fail(err, errlen, "msrl_lite_get_output: NULL destination");
  if (index < 0 || index >= static_cast<int>(h->outputs.size()))
    return fail(err, errlen, "msrl_lite_get_output: no output " + std::to_string(index));
  auto &t = h->outputs[index];
  if (t.DataSize() != nbytes)
    return fail(err, errlen, "msrl_lite_get_output: output " + std::to_string(index) + " holds " +
                                 std::to_string(t.DataSize()) + " bytes, given " + std::to_string(nbytes));
  std::shared_ptr<const void> src = t.Data();
  if (src == nullptr && nbytes > 0) return fail(err, errlen, "msrl_lite_get_output: Lite gave no data");
  if (nbytes > 0) std::memcpy(dst, src.get(), nbytes);
  return 0;
}

// Convert an ONNX file into a Lite MindIR at output_base + ".mindir" (the converter adds the
// suffix); config_file ("" for none) holds the [section] key=value options (e.g. [ascend_context]);
// device "" is Lite's general optimization (CPU), "Ascend" its ascend_oriented one, which compiles
// the graph with CANN at conversion time and reads [ascend_context].
int msrl_lite_convert(const char *onnx_path, const char *output_base, const char *config_file, const char *device,
                      char *err, size_t errlen) {
  if (onnx_path == nullptr || output_base == nullptr || config_file == nullptr || device == nullptr)
    return fail(err, errlen, "msrl_lite_convert: NULL argument");
  std::string dev(device);
  if (!dev.empty() && dev != "Ascend") return fail(err, errlen, "msrl_lite_convert: device must be '' or 'Ascend'");
  try {
    mindspore::Converter converter;
    converter.SetSaveType(mindspore::kMindIR);
    converter.SetWeightFp16(false);
    converter.SetNoFusion(false);
    if (!dev.empty()) converter.SetDevice(chars(device));
    if (config_file[0] != '\0') converter.SetConfigFile(chars(config_file));
    mindspore::Status st = converter.Convert(mindspore::converter::kFmkTypeOnnx, chars(onnx_path), chars(output_base),
                                             std::vector<char>());
    if (!st.IsOk()) {
      return fail(err, errlen, st.ToString());
    }
  } catch (const std::exception &e) {
    return fail(err, errlen, std::string("msrl_lite_convert: ") + e.what());
  } catch (...) {
    return fail(err, errlen, "msrl_lite_convert: unknown C++ exception");
  }
  return 0;
}

}  // extern "C"
