// The client's table of requests by handle: pending ones (SUBMIT sent, no answer yet) and
// completed ones whose result the caller has not released. Also holds the client's terminal
// failure (a NOTIFY, a lost connection, destruction): once set, Add() refuses new requests.
//
// Lifecycle of a record:
//   1. Add() before the SUBMIT is sent (so an answer can never arrive for an unknown handle), or
//      Withdraw() if the send fails and nobody completed it meanwhile.
//   2. TakeSlot() may hand the input slot back early (answers from the daemon). Then exactly one
//      of Complete() / FailAll() marks it completed and returns a Finished item the
//      caller acts on after the lock is dropped: free the input slot, run the callback.
//   3. Wait() reads completed records (callback-less ones); Release() erases a completed record.
// Thread-safe (one mutex and one condition variable); never calls out while holding the lock.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "client/allreduced_client.h"
#include "client/arena.h"
#include "client/status.h"

namespace ard::client {

// What the daemon answered for one request (parsed from COMPLETE or ERROR).
struct Outcome {
  Status status;
  int ndims = 0;
  int64_t shape[wire::kMaxDims] = {};
  const void* data = nullptr;  // into a mapped result segment; nullptr when bytes == 0
  uint64_t bytes = 0;          // > 0: the daemon holds a result slot until RELEASE
  std::vector<int64_t> splits;
  int join_last_rank = -1;
};

// A request that just completed; the receiver frees `slot` and runs `done` (if set) outside the
// table lock. `result` points into the record, valid until Release(handle).
struct Finished {
  uint64_t handle = 0;
  InputArena::Slot slot;
  ard_done_fn done = nullptr;
  void* user = nullptr;
  ard_result result{};
};

class RequestTable {
 public:
  // Registers a pending request. Returns the terminal failure instead when one is set.
  Status Add(uint64_t handle, ard_done_fn done, void* user, const InputArena::Slot& slot);

  // Unregisters a pending request whose SUBMIT could not be sent and returns its slot. False
  // when it is no longer pending (completed by a concurrent failure: the handle stays live).
  bool Withdraw(uint64_t handle, InputArena::Slot* slot);

  // Moves the input slot out of a pending request (it keeps pending), so the caller can free it
  // BEFORE completing: whoever observes a completion may rely on the arena space being free.
  // False when `handle` is not pending.
  bool TakeSlot(uint64_t handle, InputArena::Slot* slot);

  // Completes a pending request. False when `handle` is not pending (unknown or already done).
  bool Complete(uint64_t handle, Outcome outcome, Finished* finished);

  // Completes every pending request with `status`; when `terminal`, stores it as the failure
  // later Add() calls return (the first terminal failure wins).
  std::vector<Finished> FailAll(const Status& status, bool terminal);

  // ard_wait semantics (see allreduced_client.h). With `once`, returns ARD_PENDING after the
  // first wake-up of the table (any completion, or Wake()) even before timeout_ms: the caller
  // re-checks whether it should read the socket itself (Session::Wait).
  int Wait(uint64_t handle, int timeout_ms, ard_result* out, bool once = false);

  // Wakes every Wait(once) caller (the thread reading the socket stepped aside).
  void Wake() { completed_cv_.notify_all(); }

  // Erases a completed record. Returns false for unknown or pending handles; *send_release tells
  // whether the daemon holds a result slot for it.
  bool Release(uint64_t handle, bool* send_release);

  Status failure() const;
  size_t pending_count() const;
  size_t record_count() const;

 private:
  struct Record {
    ard_done_fn done = nullptr;
    void* user = nullptr;
    InputArena::Slot slot;
    bool completed = false;
    Outcome outcome;
    std::string message;  // outcome.status.message(), NUL-terminated storage for ard_result
  };

  // Requires mu_. Marks `record` completed with `outcome` and describes it in `finished`.
  void Finish(uint64_t handle, Record* record, Outcome outcome, Finished* finished);
  static void FillResult(const Record& record, ard_result* out);

  mutable std::mutex mu_;
  std::condition_variable completed_cv_;  // signalled whenever a record completes
  std::unordered_map<uint64_t, std::unique_ptr<Record>> records_;  // guarded by mu_
  size_t pending_ = 0;                                             // guarded by mu_
  Status failure_;                                                 // guarded by mu_
};

}  // namespace ard::client
