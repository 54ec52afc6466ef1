// A host double of the CUDA driver (libcuda.so.1) for the client library's GPU path, loaded through
// ALLREDUCED_CUDA_DRIVER_LIBRARY (client/cuda_driver.h) by client tests and by the GPU pack's dry
// run. It implements exactly the entry points cuda_driver.cc binds, on host memory: one fake
// device, allocations from malloc (a device pointer is a host pointer), copies done at once (a
// stream is always idle), interprocess events that are flags. What it checks, as the real driver
// would: freeing or copying memory it did not allocate, destroying or recording an event it did not
// create. It keeps count of what is live, so a test can tell whether the client freed its staging
// arena and events, and when (ard_fake_cuda_*; read with dlsym on the same library).
//
// Thread-safe (one mutex). Error codes are the driver's CUresult values.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>

namespace {

using CUresult = int;
constexpr CUresult kSuccess = 0;
constexpr CUresult kInvalidValue = 1;     // CUDA_ERROR_INVALID_VALUE
constexpr CUresult kNotInitialized = 3;   // CUDA_ERROR_NOT_INITIALIZED
constexpr CUresult kInvalidDevice = 101;  // CUDA_ERROR_INVALID_DEVICE
constexpr CUresult kInvalidHandle = 400;  // CUDA_ERROR_INVALID_HANDLE
constexpr char kIpcMagic[8] = {'a', 'r', 'd', 'f', 'a', 'k', 'e', 0};

struct FakeEvent {
  unsigned flags = 0;
  bool recorded = false;
};

struct State {
  std::mutex mu;
  bool initialized = false;
  std::set<uintptr_t> allocations;
  std::set<FakeEvent*> events;
  int context_retains = 0;
  int misuses = 0;  // calls on memory or events this driver does not hold
  int async_copies = 0;
};

State& S() {
  static State* s = new State();  // leaked: lives as long as the process, like the real driver
  return *s;
}

CUresult Misuse(const char* what) {
  ++S().misuses;
  std::fprintf(stderr, "fake libcuda: %s\n", what);
  return kInvalidValue;
}

}  // namespace

extern "C" {

// ---- What tests read (not part of the driver's ABI). ----
int ard_fake_cuda_live_allocations() {
  std::lock_guard<std::mutex> lock(S().mu);
  return static_cast<int>(S().allocations.size());
}
int ard_fake_cuda_live_events() {
  std::lock_guard<std::mutex> lock(S().mu);
  return static_cast<int>(S().events.size());
}
int ard_fake_cuda_async_copies() {  // cuMemcpyAsync calls (the GPU path's copies)
  std::lock_guard<std::mutex> lock(S().mu);
  return S().async_copies;
}
int ard_fake_cuda_misuses() {
  std::lock_guard<std::mutex> lock(S().mu);
  return S().misuses;
}

// ---- The driver entry points cuda_driver.cc binds. ----
CUresult cuInit(unsigned flags) {
  std::lock_guard<std::mutex> lock(S().mu);
  if (flags != 0) return kInvalidValue;
  S().initialized = true;
  return kSuccess;
}

CUresult cuDeviceGetCount(int* count) {
  *count = 1;
  return S().initialized ? kSuccess : kNotInitialized;
}

CUresult cuDeviceGet(int* device, int ordinal) {
  if (ordinal != 0) return kInvalidDevice;
  *device = 0;
  return kSuccess;
}

CUresult cuDeviceGetPCIBusId(char* bus_id, int len, int device) {
  if (device != 0 || len <= 0) return kInvalidValue;
  std::snprintf(bus_id, static_cast<size_t>(len), "0000:00:00.0");
  return kSuccess;
}

CUresult cuDevicePrimaryCtxRetain(void** ctx, int device) {
  std::lock_guard<std::mutex> lock(S().mu);
  if (device != 0) return kInvalidDevice;
  ++S().context_retains;
  *ctx = &S();
  return kSuccess;
}

CUresult cuDevicePrimaryCtxRelease_v2(int device) {
  std::lock_guard<std::mutex> lock(S().mu);
  if (device != 0 || S().context_retains == 0) return Misuse("context released too often");
  --S().context_retains;
  return kSuccess;
}

CUresult cuCtxPushCurrent_v2(void* ctx) { return ctx == &S() ? kSuccess : kInvalidHandle; }
CUresult cuCtxPopCurrent_v2(void** ctx) {
  if (ctx != nullptr) *ctx = &S();
  return kSuccess;
}
CUresult cuCtxSetCurrent(void* ctx) {
  return ctx == nullptr || ctx == &S() ? kSuccess : kInvalidHandle;
}

CUresult cuMemAlloc_v2(uintptr_t* ptr, size_t bytes) {
  void* p = bytes == 0 ? nullptr : std::malloc(bytes);
  if (p == nullptr) return 2;  // CUDA_ERROR_OUT_OF_MEMORY
  std::lock_guard<std::mutex> lock(S().mu);
  S().allocations.insert(reinterpret_cast<uintptr_t>(p));
  *ptr = reinterpret_cast<uintptr_t>(p);
  return kSuccess;
}

CUresult cuMemFree_v2(uintptr_t ptr) {
  std::lock_guard<std::mutex> lock(S().mu);
  if (S().allocations.erase(ptr) == 0) return Misuse("cuMemFree of memory it did not allocate");
  std::free(reinterpret_cast<void*>(ptr));
  return kSuccess;
}

// A handle names the allocation and the exporting process.
CUresult cuIpcGetMemHandle(char* handle, uintptr_t ptr) {
  std::lock_guard<std::mutex> lock(S().mu);
  if (S().allocations.count(ptr) == 0) return Misuse("cuIpcGetMemHandle of unknown memory");
  std::memset(handle, 0, 64);
  std::memcpy(handle, kIpcMagic, sizeof(kIpcMagic));
  const int64_t pid = ::getpid();
  std::memcpy(handle + 8, &pid, sizeof(pid));
  std::memcpy(handle + 16, &ptr, sizeof(ptr));
  return kSuccess;
}

CUresult cuEventCreate(FakeEvent** event, unsigned flags) {
  std::lock_guard<std::mutex> lock(S().mu);
  auto* e = new FakeEvent();
  e->flags = flags;
  S().events.insert(e);
  *event = e;
  return kSuccess;
}

CUresult cuEventDestroy_v2(FakeEvent* event) {
  std::lock_guard<std::mutex> lock(S().mu);
  if (S().events.erase(event) == 0) return Misuse("cuEventDestroy of an unknown event");
  delete event;
  return kSuccess;
}

CUresult cuEventRecord(FakeEvent* event, void* stream) {
  std::lock_guard<std::mutex> lock(S().mu);
  if (S().events.count(event) == 0) return Misuse("cuEventRecord of an unknown event");
  event->recorded = true;
  return kSuccess;
}

CUresult cuIpcGetEventHandle(char* handle, FakeEvent* event) {
  std::lock_guard<std::mutex> lock(S().mu);
  if (S().events.count(event) == 0) return Misuse("cuIpcGetEventHandle of an unknown event");
  if ((event->flags & 0x4) == 0) return kInvalidValue;  // not CU_EVENT_INTERPROCESS
  std::memset(handle, 0, 64);
  std::memcpy(handle, kIpcMagic, sizeof(kIpcMagic));
  std::memcpy(handle + 16, &event, sizeof(event));
  return kSuccess;
}

CUresult cuStreamWaitEvent(void* stream, FakeEvent* event, unsigned flags) {
  std::lock_guard<std::mutex> lock(S().mu);
  return S().events.count(event) != 0 ? kSuccess : Misuse("cuStreamWaitEvent on an unknown event");
}

CUresult cuMemcpyAsync(uintptr_t dst, uintptr_t src, size_t bytes, void* stream) {
  {
    std::lock_guard<std::mutex> lock(S().mu);
    ++S().async_copies;
  }
  std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes);
  return kSuccess;
}
CUresult cuMemcpyHtoD_v2(uintptr_t dst, const void* src, size_t bytes) {
  std::memcpy(reinterpret_cast<void*>(dst), src, bytes);
  return kSuccess;
}
CUresult cuMemcpyDtoH_v2(void* dst, uintptr_t src, size_t bytes) {
  std::memcpy(dst, reinterpret_cast<const void*>(src), bytes);
  return kSuccess;
}
CUresult cuMemsetD8_v2(uintptr_t dst, unsigned char value, size_t bytes) {
  std::memset(reinterpret_cast<void*>(dst), value, bytes);
  return kSuccess;
}

CUresult cuStreamCreate(void** stream, unsigned flags) {
  *stream = new char(0);
  return kSuccess;
}
CUresult cuStreamDestroy_v2(void* stream) {
  delete static_cast<char*>(stream);
  return kSuccess;
}
CUresult cuStreamSynchronize(void* stream) { return kSuccess; }

CUresult cuGetErrorString(CUresult error, const char** text) {
  switch (error) {
    case kSuccess:
      *text = "no error";
      return kSuccess;
    case kInvalidValue:
      *text = "invalid argument (fake libcuda)";
      return kSuccess;
    case 2:
      *text = "out of memory (fake libcuda)";
      return kSuccess;
    case kNotInitialized:
      *text = "initialization error (fake libcuda)";
      return kSuccess;
    case kInvalidDevice:
      *text = "invalid device ordinal (fake libcuda)";
      return kSuccess;
    case kInvalidHandle:
      *text = "invalid resource handle (fake libcuda)";
      return kSuccess;
  }
  return kInvalidValue;
}

}  // extern "C"
