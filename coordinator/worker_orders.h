// One worker's orders — the start and stop Assignments the coordinator gives it — within one session
// (a registration): numbered (Assignment.seq, 1, 2, ...), each held until the store ticket it depends
// on is durable (write-ahead: a START leaves only once its attempt is stored), given in order to the
// session's newest stream, pulled (Take) or pushed to a sink (Attach), kept until the worker
// acknowledges it (Acknowledge), and given first again to a newer stream of the session (a reconnect
// may have lost them in flight). None overtakes another.
//
// Lock discipline: none of its own. The coordinator calls every method under its lock; a sink's
// Deliver and End come under it too (AssignmentSink says what they may do). `durable` arguments are
// the StoreWriter's durable() read under that lock.
#ifndef TESSERA_COORDINATOR_WORKER_ORDERS_H_
#define TESSERA_COORDINATOR_WORKER_ORDERS_H_

#include <cstdint>
#include <deque>
#include <memory>

#include "absl/status/status.h"
#include "tessera/v1/worker_service.pb.h"

namespace tessera::coordinator {

// The receiving end of a worker's assignment stream that the coordinator pushes orders into (the
// gRPC handler's reactor: no thread waits per stream). Both calls come under the coordinator's lock:
// they must not block nor call the Coordinator.
class AssignmentSink {
 public:
  virtual ~AssignmentSink() = default;
  // The next order for the worker, in order. It stays with the coordinator until acknowledged; the
  // sink shares it (it is never changed).
  virtual void Deliver(std::shared_ptr<const v1::Assignment> a) = 0;
  // The stream is over — a newer stream or registration replaced it, or the worker was lost: finish
  // the call with `status`. Nothing is delivered after it.
  virtual void End(const absl::Status& status) = 0;
};

class WorkerOrders {
 public:
  // Numbers `a` in the session and queues it, to leave once ticket `after` (0: none) is at most
  // `durable`; a pushed stream gets at once what may leave. Returns its seq.
  int64_t Send(v1::Assignment a, uint64_t after, uint64_t durable);
  // Whether an order waits for a ticket beyond `durable` (the coordinator flushes the worker when the
  // store catches up).
  bool HeldBeyond(uint64_t durable) const { return held_until_ > durable; }
  // Gives the pushed stream, if there is one, every order that may leave with `durable`.
  void Flush(uint64_t durable);
  // A pulled stream's next order, if one may leave with `durable` (null if none); kept until acknowledged.
  std::shared_ptr<const v1::Assignment> Take(uint64_t durable);

  // Stream number `stream` (larger than every earlier one) opens: the pushed stream, if any, ends
  // with `end_previous`, and the orders given and not acknowledged go first again, in order.
  void Open(int64_t stream, const absl::Status& end_previous);
  // Makes the newest stream a pushed one into `sink` (not owned; it stays until EndSink, a newer Open,
  // or Detach) and gives it what may leave with `durable`.
  void Attach(AssignmentSink* sink, uint64_t durable);
  // Stream `stream`'s sink goes away without being ended (its call finished): forgotten, if `stream`
  // is still the newest.
  void Detach(int64_t stream);
  // Ends the pushed stream, if there is one, with `status`.
  void EndSink(const absl::Status& status);

  // The worker has applied every order up to `applied_seq`: those given are forgotten. An
  // acknowledgement never goes back. InvalidArgument (naming applied_seq) when it is negative or
  // beyond the newest order of the session; nothing changes then.
  absl::Status Acknowledge(int64_t applied_seq);

  // The worker is lost: every order is dropped (its registration's reconciliation replaces them) and
  // the pushed stream ends with `status`; numbering goes on.
  void Drop(const absl::Status& status);
  // A new session: as Drop, and numbering starts again from 1.
  void NewSession(const absl::Status& status);

  int64_t last_seq() const { return last_seq_; }        // Of the newest order of the session (0: none).
  int64_t applied_seq() const { return applied_seq_; }  // The worker's acknowledgement.
  int64_t stream() const { return stream_; }            // The newest stream (0: none).
  bool pushed() const { return sink_ != nullptr; }       // Whether the newest stream is a pushed one.
  size_t waiting() const { return queue_.size(); }       // Not yet given to a stream.
  size_t unacknowledged() const { return sent_.size(); }  // Given, not yet acknowledged.

 private:
  // Orders are shared, never copied: with the stream's sink until written, here until acknowledged
  // (a 100,000-rank job's orders each carry its spec).
  struct Queued {
    std::shared_ptr<const v1::Assignment> order;
    uint64_t after = 0;  // The StoreWriter ticket it waits for (0: none).
  };
  bool FrontReady(uint64_t durable) const { return !queue_.empty() && queue_.front().after <= durable; }
  // Moves the front order to sent_ (until acknowledged) and returns it.
  std::shared_ptr<const v1::Assignment> PopFront();

  std::deque<Queued> queue_;                              // Not yet given to a stream.
  std::deque<std::shared_ptr<const v1::Assignment>> sent_;  // Given, not yet acknowledged.
  uint64_t held_until_ = 0;  // The largest `after` of an order queued.
  int64_t last_seq_ = 0;
  int64_t applied_seq_ = 0;
  int64_t stream_ = 0;
  AssignmentSink* sink_ = nullptr;  // Stream stream_'s, when it is a pushed one.
};

}  // namespace tessera::coordinator

#endif  // TESSERA_COORDINATOR_WORKER_ORDERS_H_
