// The store's requests (server_loop.h): each operation on the table,
// parking a Get/Wait on a missing key and waking it, the handshake, and
// what input at the end of a connection (or while it waits) means.
// Runs on the server thread only.
#include <errno.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/deadline.h"
#include "base/logging.h"
#include "base/status.h"
#include "store/server_loop.h"
#include "store/wire.h"

namespace braid {
namespace store_internal {
namespace {

std::string Quoted(absl::string_view key) {
  return absl::StrCat("\"", absl::CHexEscape(key), "\"");
}

std::string QuotedList(const std::vector<std::string>& keys) {
  return absl::StrJoin(keys, ", ", [](std::string* out, const std::string& key) {
    absl::StrAppend(out, Quoted(key));
  });
}

// What a barrier that timed out answers; `arrived`: the counter's value.
std::string BarrierTimedOut(absl::string_view key, absl::string_view arrived, int64_t count, int64_t timeout_ms) {
  return absl::StrCat("timed out after ", timeout_ms, " ms at barrier ", Quoted(key), ": ", arrived, " of ", count,
                      " arrived");
}

// Timeouts arrive as "ms left"; < 0 means none.
absl::Time DeadlineAfter(int64_t timeout_ms) {
  return timeout_ms < 0 ? absl::InfiniteFuture() : absl::Now() + absl::Milliseconds(timeout_ms);
}

}  // namespace

bool ServerLoop::HasAll(const std::vector<std::string>& keys, std::string* first_missing) const {
  for (const std::string& key : keys) {
    if (!table_.contains(key)) {
      if (first_missing != nullptr) *first_missing = key;
      return false;
    }
  }
  return true;
}

void ServerLoop::HandleRequest(Connection& conn, absl::string_view payload) {
  FieldReader reader(payload);
  uint8_t version = 0;
  uint8_t opcode = 0;
  reader.U8(&version);  // a payload has at least 2 bytes (checked by the caller)
  reader.U8(&opcode);
  if (version != kProtocolVersion) {
    Reject(conn, absl::StrCat("unsupported protocol version ", version, " (this server speaks ",
                              kProtocolVersion, ")"));
    return;
  }
  if (conn.phase != Phase::kServing) {
    HandleHandshake(conn, opcode, reader);
    return;
  }
  Request r{conn, reader, OpcodeName(opcode), payload.size()};
  switch (static_cast<Opcode>(opcode)) {
    case Opcode::kSet: return Set(r, /*answer=*/true);
    case Opcode::kPut: return Set(r, /*answer=*/false);
    case Opcode::kGet: return Get(r);
    case Opcode::kAdd: return Add(r);
    case Opcode::kArrive: return Arrive(r);
    case Opcode::kCompareSet: return CompareSet(r);
    case Opcode::kWait: return WaitOrCheck(r, /*is_wait=*/true);
    case Opcode::kCheck: return WaitOrCheck(r, /*is_wait=*/false);
    case Opcode::kDelete: return Delete(r);
    case Opcode::kNumKeys:
      if (!FieldsOk(r, true)) return;
      Respond(conn, std::move(FrameWriter().U8(0).I64(static_cast<int64_t>(table_.size()))).Finish());
      return;
    case Opcode::kHello:
      Refuse(conn, absl::StatusCode::kFailedPrecondition,
             conn.server_nonce.empty() ? "authentication is off on this store (it was started without a job secret)"
                                       : "handshake already done");
      return;
  }
  Reject(conn, absl::StrCat("unknown opcode ", opcode));
}

bool ServerLoop::FieldsOk(Request& r, bool parsed) {
  if (!parsed) {
    Reject(r.conn, absl::StrCat("truncated ", r.name, " request (", r.payload_bytes, "-byte payload)"));
    return false;
  }
  if (r.reader.remaining() != 0) {
    Reject(r.conn, absl::StrCat(r.reader.remaining(), " trailing bytes after a ", r.name, " request"));
    return false;
  }
  return true;
}

void ServerLoop::Set(Request& r, bool answer) {
  std::string key, value;
  if (!FieldsOk(r, r.reader.String(&key) && r.reader.String(&value))) return;
  const bool created = table_.insert_or_assign(key, std::move(value)).second;
  if (answer) Respond(r.conn, std::move(FrameWriter().U8(0)).Finish());
  if (created) WakeKey(key);
}

void ServerLoop::Get(Request& r) {
  std::string key;
  int64_t timeout_ms = 0;
  if (!FieldsOk(r, r.reader.String(&key) && r.reader.I64(&timeout_ms))) return;
  if (auto it = table_.find(key); it != table_.end()) {
    Respond(r.conn, std::move(FrameWriter().U8(0).String(it->second)).Finish());
  } else if (timeout_ms == 0) {
    RespondError(r.conn, absl::StatusCode::kDeadlineExceeded, absl::StrCat("timed out waiting for key ", Quoted(key)));
  } else {
    Park(r.conn, Parked{Opcode::kGet, {key}, key, DeadlineAfter(timeout_ms), timeout_ms});
  }
}

bool ServerLoop::AddToCounter(Request& r, const std::string& key, int64_t delta, int64_t* sum) {
  int64_t current = 0;
  auto it = table_.find(key);
  if (it != table_.end() && !absl::SimpleAtoi(it->second, &current)) {
    RespondError(r.conn, absl::StatusCode::kFailedPrecondition,
                 absl::StrCat("cannot add to key ", Quoted(key), ": its value is not a decimal integer: ",
                              Quoted(absl::string_view(it->second).substr(0, 40)),
                              it->second.size() > 40 ? "..." : ""));
    return false;
  }
  if (__builtin_add_overflow(current, delta, sum)) {
    RespondError(r.conn, absl::StatusCode::kOutOfRange,
                 absl::StrCat("adding ", delta, " to key ", Quoted(key), " (", current, ") overflows int64"));
    return false;
  }
  const bool created = it == table_.end();
  if (created) {
    table_.emplace(key, absl::StrCat(*sum));
    WakeKey(key);
  } else {
    it->second = absl::StrCat(*sum);
  }
  ReleaseArrivals(key, *sum);
  return true;
}

void ServerLoop::Add(Request& r) {
  std::string key;
  int64_t delta = 0;
  if (!FieldsOk(r, r.reader.String(&key) && r.reader.I64(&delta))) return;
  int64_t sum = 0;
  if (AddToCounter(r, key, delta, &sum)) Respond(r.conn, std::move(FrameWriter().U8(0).I64(sum)).Finish());
}

// A barrier in one round trip: the add and the wait for the count.
void ServerLoop::Arrive(Request& r) {
  std::string key;
  int64_t count = 0, timeout_ms = 0;
  if (!FieldsOk(r, r.reader.String(&key) && r.reader.I64(&count) && r.reader.I64(&timeout_ms))) return;
  int64_t arrival = 0;
  if (!AddToCounter(r, key, 1, &arrival)) return;
  if (arrival >= count) {
    Respond(r.conn, std::move(FrameWriter().U8(0).I64(arrival)).Finish());
  } else if (timeout_ms == 0) {
    RespondError(r.conn, absl::StatusCode::kDeadlineExceeded,
                 BarrierTimedOut(key, absl::StrCat(arrival), count, timeout_ms));
  } else {
    Park(r.conn, Parked{Opcode::kArrive, {key}, key, DeadlineAfter(timeout_ms), timeout_ms, count, arrival});
  }
}

void ServerLoop::ReleaseArrivals(const std::string& key, int64_t value) {
  auto it = arrivals_.find(key);
  if (it == arrivals_.end()) return;
  std::set<std::pair<int64_t, uint64_t>>& parked = it->second;
  const auto end = parked.upper_bound({value, UINT64_MAX});
  std::vector<uint64_t> ids;
  for (auto at = parked.begin(); at != end; ++at) ids.push_back(at->second);
  parked.erase(parked.begin(), end);
  if (parked.empty()) arrivals_.erase(it);
  for (uint64_t id : ids) {
    Connection* conn = Find(id);
    if (conn == nullptr || !conn->parked || conn->parked->op != Opcode::kArrive) continue;
    const int64_t arrival = conn->parked->arrival;
    Unpark(*conn);
    Respond(*conn, std::move(FrameWriter().U8(0).I64(arrival)).Finish());
  }
}

void ServerLoop::CompareSet(Request& r) {
  std::string key, expected, desired;
  if (!FieldsOk(r, r.reader.String(&key) && r.reader.String(&expected) && r.reader.String(&desired))) return;
  auto it = table_.find(key);
  if (it == table_.end()) {
    if (!expected.empty()) {
      // c10d's answer for a missing key: `expected`, nothing set.
      Respond(r.conn, std::move(FrameWriter().U8(0).String(expected)).Finish());
      return;
    }
    table_.emplace(key, desired);
    Respond(r.conn, std::move(FrameWriter().U8(0).String(desired)).Finish());
    WakeKey(key);
    return;
  }
  if (it->second == expected) it->second = std::move(desired);
  Respond(r.conn, std::move(FrameWriter().U8(0).String(it->second)).Finish());
}

void ServerLoop::WaitOrCheck(Request& r, bool is_wait) {
  uint32_t count = 0;
  bool parsed = r.reader.U32(&count);
  std::vector<std::string> keys;
  // No reserve(count): the count is the client's claim; every key read
  // below is backed by bytes really received.
  for (uint32_t i = 0; parsed && i < count; ++i) {
    std::string key;
    parsed = r.reader.String(&key);
    if (parsed) keys.push_back(std::move(key));
  }
  int64_t timeout_ms = 0;
  if (is_wait) parsed = parsed && r.reader.I64(&timeout_ms);
  if (!FieldsOk(r, parsed)) return;
  std::string missing;
  const bool all = HasAll(keys, &missing);
  if (!is_wait) {
    Respond(r.conn, std::move(FrameWriter().U8(0).U8(all ? 1 : 0)).Finish());
  } else if (all) {
    Respond(r.conn, std::move(FrameWriter().U8(0)).Finish());
  } else if (timeout_ms == 0) {
    RespondError(r.conn, absl::StatusCode::kDeadlineExceeded,
                 absl::StrCat("timed out waiting for keys ", QuotedList(keys)));
  } else {
    Park(r.conn, Parked{Opcode::kWait, std::move(keys), missing, DeadlineAfter(timeout_ms), timeout_ms});
  }
}

void ServerLoop::Delete(Request& r) {
  std::string key;
  if (!FieldsOk(r, r.reader.String(&key))) return;
  const bool existed = table_.erase(key) > 0;
  Respond(r.conn, std::move(FrameWriter().U8(0).U8(existed ? 1 : 0)).Finish());
}

void ServerLoop::HandleHandshake(Connection& conn, uint8_t opcode, FieldReader& reader) {
  if (opcode != static_cast<uint8_t>(Opcode::kHello)) {
    Refuse(conn, absl::StatusCode::kUnauthenticated,
           absl::StrCat("this store admits only processes that know the job secret (BRAID_JOB_SECRET); got ",
                        OpcodeName(opcode), " before the handshake"));
    return;
  }
  std::string field;
  if (!reader.String(&field) || reader.remaining() != 0) {
    Refuse(conn, absl::StatusCode::kUnauthenticated, "malformed handshake");
    return;
  }
  if (conn.phase == Phase::kAwaitingHello) {
    absl::StatusOr<std::string> nonce = JobSecret::Nonce();
    if (field.size() != JobSecret::kNonceBytes || !nonce.ok()) {
      Refuse(conn, absl::StatusCode::kUnauthenticated, "malformed handshake nonce");
      return;
    }
    conn.client_nonce = std::move(field);
    conn.server_nonce = *std::move(nonce);
    conn.phase = Phase::kAwaitingProof;
    Respond(conn, std::move(FrameWriter()
                                .U8(0)
                                .String(conn.server_nonce)
                                .String(options_.secret.Prove("store-server", conn.client_nonce, conn.server_nonce)))
                      .Finish());
    return;
  }
  if (!options_.secret.Verify("store-client", conn.server_nonce, conn.client_nonce, field)) {
    Refuse(conn, absl::StatusCode::kPermissionDenied, "wrong job secret");
    return;
  }
  conn.phase = Phase::kServing;
  for (auto it = handshake_deadlines_.begin(); it != handshake_deadlines_.end(); ++it) {
    if (it->second == conn.id) {
      handshake_deadlines_.erase(it);
      break;
    }
  }
  Respond(conn, std::move(FrameWriter().U8(0)).Finish());
}

void ServerLoop::Refuse(Connection& conn, absl::StatusCode code, absl::string_view why) {
  RespondError(conn, code, why);  // best effort: the client learns why
  BRAID_LOG(WARNING) << "store server on port " << port_ << ": refused " << conn.peer << ": " << why;
  Close(conn);
}

void ServerLoop::ExpireHandshakes() {
  const absl::Time now = absl::Now();
  while (!handshake_deadlines_.empty() && handshake_deadlines_.begin()->first <= now) {
    const uint64_t id = handshake_deadlines_.begin()->second;
    handshake_deadlines_.erase(handshake_deadlines_.begin());
    if (Connection* conn = Find(id); conn != nullptr && conn->phase != Phase::kServing) {
      Refuse(*conn, absl::StatusCode::kDeadlineExceeded,
             absl::StrCat("no handshake within ", absl::FormatDuration(options_.handshake_timeout)));
    }
  }
}

void ServerLoop::Park(Connection& conn, Parked parked) {
  if (parked.op == Opcode::kArrive) {
    arrivals_[parked.waiting_on].emplace(parked.count, conn.id);
  } else {
    waiters_[parked.waiting_on].push_back(conn.id);
  }
  if (parked.deadline != absl::InfiniteFuture()) deadlines_.emplace(parked.deadline, conn.id);
  conn.parked = std::move(parked);
  UpdateInterest(conn);
}

void ServerLoop::Unpark(Connection& conn) {
  if (!conn.parked) return;
  const Parked& parked = *conn.parked;
  if (parked.deadline != absl::InfiniteFuture()) deadlines_.erase({parked.deadline, conn.id});
  if (parked.op == Opcode::kArrive) {
    // Released arrivals were taken out of arrivals_ already.
    if (auto it = arrivals_.find(parked.waiting_on); it != arrivals_.end()) {
      it->second.erase({parked.count, conn.id});
      if (it->second.empty()) arrivals_.erase(it);
    }
  } else if (auto it = waiters_.find(parked.waiting_on); it != waiters_.end()) {
    std::vector<uint64_t>& ids = it->second;
    ids.erase(std::remove(ids.begin(), ids.end(), conn.id), ids.end());
    if (ids.empty()) waiters_.erase(it);
  }
  conn.parked.reset();
  // The caller answers (or closes) next; then the connection may read again.
  ready_.push_back(conn.id);
}

void ServerLoop::WakeKey(const std::string& key) {
  auto it = waiters_.find(key);
  if (it == waiters_.end()) return;
  const std::vector<uint64_t> ids = std::move(it->second);
  waiters_.erase(it);
  for (uint64_t id : ids) {
    Connection* conn = Find(id);
    if (conn == nullptr || !conn->parked || conn->parked->waiting_on != key) continue;
    Parked& parked = *conn->parked;
    std::string missing;
    if (parked.op == Opcode::kWait && !HasAll(parked.keys, &missing)) {
      // Another key is still missing: wait for that one now.
      parked.waiting_on = missing;
      waiters_[missing].push_back(id);
      continue;
    }
    const Opcode op = parked.op;
    Unpark(*conn);
    if (op == Opcode::kGet) {
      Respond(*conn, std::move(FrameWriter().U8(0).String(table_.at(key))).Finish());
    } else {
      Respond(*conn, std::move(FrameWriter().U8(0)).Finish());
    }
  }
}

void ServerLoop::ExpireWaiters() {
  const absl::Time now = absl::Now();
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    const uint64_t id = deadlines_.begin()->second;
    Connection* conn = Find(id);
    if (conn == nullptr || !conn->parked) {  // cannot happen: Close unparks
      deadlines_.erase(deadlines_.begin());
      continue;
    }
    const Parked parked = *conn->parked;  // a copy: Unpark clears the original
    Unpark(*conn);
    std::string message;
    if (parked.op == Opcode::kGet) {
      message = absl::StrCat("timed out after ", parked.timeout_ms, " ms waiting for key ",
                             Quoted(parked.keys[0]));
    } else if (parked.op == Opcode::kArrive) {
      auto it = table_.find(parked.waiting_on);
      message = BarrierTimedOut(parked.waiting_on, it == table_.end() ? "(counter deleted)" : it->second,
                                parked.count, parked.timeout_ms);
    } else {
      std::vector<std::string> missing;
      for (const std::string& key : parked.keys) {
        if (!table_.contains(key)) missing.push_back(key);
      }
      message = absl::StrCat("timed out after ", parked.timeout_ms, " ms waiting for keys ",
                             QuotedList(parked.keys), " (missing ", QuotedList(missing), ")");
    }
    RespondError(*conn, absl::StatusCode::kDeadlineExceeded, message);
  }
}

// What a connection's end of input means, and input while it waits.
void ServerLoop::ReadWhileParked(Connection& conn) {
  char byte;
  const ssize_t n = ::read(conn.fd.get(), &byte, 1);
  if (n == 0) {
    BRAID_LOG(DEBUG) << "store server: " << conn.peer << " hung up while waiting";
    Close(conn);
  } else if (n > 0) {
    Reject(conn, "a request sent before the answer to the one waiting");
  } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
    Close(conn);
  }
}

void ServerLoop::OnEof(Connection& conn) {
  const size_t pending = conn.in.size() - conn.in_pos;
  if (pending == 0) {
    BRAID_LOG(DEBUG) << "store server: " << conn.peer << " disconnected";
    Close(conn);
    return;
  }
  if (pending < kFrameHeaderBytes) {
    Reject(conn, absl::StrCat("connection closed after ", pending, " bytes of a frame header"));
  } else {
    const uint32_t length = DecodeU32(conn.in.data() + conn.in_pos);
    Reject(conn, absl::StrCat("connection closed mid-frame: truncated frame, ",
                              pending - kFrameHeaderBytes, " of ", length, " payload bytes"));
  }
}

}  // namespace store_internal
}  // namespace braid
