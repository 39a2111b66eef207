// TcpStore: the store's client. One connection, one request in flight,
// serialized by mu_. See tcp_store.h for the protocol.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/bytes.h"
#include "base/deadline.h"
#include "base/fd.h"
#include "base/mutex.h"
#include "base/socket.h"
#include "base/status.h"
#include "store/tcp_store.h"
#include "store/wire.h"

namespace braid {
namespace {

// An answer that fits (every one but a large Get) arrives in one read.
constexpr size_t kFirstReadBytes = 4096;

using store_internal::FieldReader;
using store_internal::FrameWriter;
using store_internal::kProtocolVersion;
using store_internal::Opcode;

std::string Quoted(absl::string_view key) {
  return absl::StrCat("\"", absl::CHexEscape(key), "\"");
}

std::string QuotedList(absl::Span<const std::string> keys) {
  return absl::StrJoin(keys, ", ", [](std::string* out, const std::string& key) {
    absl::StrAppend(out, Quoted(key));
  });
}

FrameWriter Request(Opcode op) {
  FrameWriter writer;
  writer.U8(kProtocolVersion).U8(static_cast<uint8_t>(op));
  return writer;
}

// The time left until `deadline` as the wire's timeout_ms: rounded up so the
// server never gives up before the client's deadline; 0 once passed; -1 for
// no deadline.
int64_t TimeoutMs(Deadline deadline) {
  if (deadline == absl::InfiniteFuture()) return -1;
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  return absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1)));
}

absl::Span<const std::byte> Bytes(const std::string& text) {
  return absl::MakeConstSpan(reinterpret_cast<const std::byte*>(text.data()), text.size());
}

absl::Status MalformedResponse(const HostPort& address, const std::string& what) {
  return absl::InternalError(absl::StrCat("store ", ToString(address), ": ", what,
                                          ": malformed response from the server"));
}

}  // namespace

TcpStore::TcpStore(HostPort address, UniqueFd fd, absl::Duration io_timeout)
    : address_(std::move(address)), io_timeout_(io_timeout), fd_(std::move(fd)) {}

absl::StatusOr<std::unique_ptr<TcpStore>> TcpStore::Connect(const HostPort& address, Deadline deadline,
                                                            const JobSecret& secret) {
  BRAID_ASSIGN_OR_RETURN(absl::Duration io_timeout, DefaultTimeout());
  absl::StatusOr<UniqueFd> fd = ConnectTcp(address, deadline);
  if (!fd.ok()) return Annotate(fd.status(), "store client");
  std::unique_ptr<TcpStore> store(new TcpStore(address, *std::move(fd), io_timeout));
  // Something that accepts connections but is not a store (another program
  // on the port) must fail here, by the deadline, not in the first call.
  absl::Status answered = secret.enabled() ? store->Authenticate(secret, deadline) : store->Probe(deadline);
  if (absl::IsDeadlineExceeded(answered) || absl::IsUnavailable(answered)) {
    return absl::Status(answered.code(), absl::StrCat(answered.message(), " (whatever listens on ", ToString(address),
                                                      " does not answer as braid's store: another program?)"));
  }
  BRAID_RETURN_IF_ERROR(answered);
  return store;
}

absl::Status TcpStore::Probe(Deadline deadline) {
  BRAID_ASSIGN_OR_RETURN(std::string fields,
                         RoundTrip("first request (NumKeys)", std::move(Request(Opcode::kNumKeys)).Finish(), deadline));
  FieldReader reader(fields);
  int64_t count = 0;
  if (!reader.I64(&count) || reader.remaining() != 0) return MalformedResponse(address_, "first request (NumKeys)");
  return absl::OkStatus();
}

absl::Status TcpStore::Authenticate(const JobSecret& secret, Deadline deadline) {
  BRAID_ASSIGN_OR_RETURN(std::string client_nonce, JobSecret::Nonce());
  BRAID_ASSIGN_OR_RETURN(
      std::string fields,
      RoundTrip("authentication", std::move(Request(Opcode::kHello).String(client_nonce)).Finish(), deadline));
  FieldReader reader(fields);
  std::string server_nonce, server_proof;
  if (!reader.String(&server_nonce) || !reader.String(&server_proof) || reader.remaining() != 0) {
    return MalformedResponse(address_, "authentication");
  }
  if (!secret.Verify("store-server", client_nonce, server_nonce, server_proof)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "store ", ToString(address_), ": the server does not know this job's secret (BRAID_JOB_SECRET differs)"));
  }
  BRAID_ASSIGN_OR_RETURN(
      fields, RoundTrip("authentication",
                        std::move(Request(Opcode::kHello).String(secret.Prove("store-client", server_nonce, client_nonce)))
                            .Finish(),
                        deadline));
  if (!fields.empty()) return MalformedResponse(address_, "authentication");
  return absl::OkStatus();
}

absl::Status TcpStore::Fail(const std::string& where_now, const absl::Status& cause) {
  fd_.Reset();
  broken_ = cause;
  // A Put has no answer: a server that refused it shows only now.
  const std::string where =
      unanswered_.empty() ? where_now
                          : absl::StrCat(where_now, " (after ", unanswered_, ", sent without an answer)");
  if (cause.code() == absl::StatusCode::kDeadlineExceeded) {
    return absl::DeadlineExceededError(absl::StrCat(where, ": no answer from the server by the deadline plus ",
                                                    absl::FormatDuration(kServerGrace), "; connection closed (",
                                                    cause.message(), ")"));
  }
  if (cause.code() == absl::StatusCode::kInternal) {
    return absl::InternalError(absl::StrCat(where, ": ", cause.message(), "; connection closed"));
  }
  return absl::UnavailableError(absl::StrCat(where, ": connection to the store server lost: ", cause.message()));
}

absl::Status TcpStore::Send(const std::string& where, const std::string& frame) {
  if (!broken_.ok()) {
    return absl::UnavailableError(
        absl::StrCat(where, ": connection unusable after an earlier failure: ", broken_.message()));
  }
  if (absl::Status sent = SendAll(fd_.get(), Bytes(frame), DeadlineIn(io_timeout_)); !sent.ok()) {
    return Fail(where, sent);
  }
  return absl::OkStatus();
}

absl::Status TcpStore::SendOnly(const std::string& what, std::string frame) {
  MutexLock lock(&mu_);
  BRAID_RETURN_IF_ERROR(Send(absl::StrCat("store ", ToString(address_), ": ", what), frame));
  unanswered_ = what;
  return absl::OkStatus();
}

absl::StatusOr<std::string> TcpStore::RoundTrip(const std::string& what, std::string frame,
                                                Deadline wait_deadline) {
  MutexLock lock(&mu_);
  const std::string where = absl::StrCat("store ", ToString(address_), ": ", what);
  // Every failure below leaves the stream at an unknown point (a response
  // may still come), so the connection is closed for good.
  auto fail = [&](const absl::Status& cause) { return Fail(where, cause); };
  BRAID_RETURN_IF_ERROR(Send(where, frame));
  // A deadline already passed still gets the server's answer (the key may
  // exist): the grace counts from now then, not from the past deadline.
  const Deadline recv_deadline = wait_deadline == absl::InfiniteFuture()
                                     ? wait_deadline
                                     : std::max(wait_deadline, absl::Now()) + kServerGrace;
  // The header and, most often, the whole answer in one read (a client has
  // one request outstanding: nothing can follow the answer).
  std::array<std::byte, kFirstReadBytes> first;
  absl::StatusOr<size_t> got = RecvAnswer(fd_.get(), absl::MakeSpan(first), store_internal::kFrameHeaderBytes,
                                          recv_deadline);
  if (!got.ok()) return fail(got.status());
  const uint32_t length = store_internal::DecodeU32(reinterpret_cast<const char*>(first.data()));
  const size_t received = *got - store_internal::kFrameHeaderBytes;
  if (length < 1 || length > kMaxResponseBytes || received > length) {
    return fail(absl::InternalError(absl::StrCat("response frame of ", length, " bytes (", received, " received)")));
  }
  std::string payload(length, '\0');
  std::memcpy(payload.data(), first.data() + store_internal::kFrameHeaderBytes, received);
  if (absl::Status rest = RecvAll(fd_.get(),
                                  absl::MakeSpan(reinterpret_cast<std::byte*>(payload.data()) + received,
                                                 length - received),
                                  recv_deadline);
      !rest.ok()) {
    return fail(rest);
  }
  unanswered_.clear();
  const auto code = static_cast<uint8_t>(payload[0]);
  payload.erase(0, 1);
  if (code == 0) return payload;
  FieldReader reader(payload);
  std::string message;
  if (!reader.String(&message) || reader.remaining() != 0) return MalformedResponse(address_, what);
  const auto status_code = code <= static_cast<uint8_t>(absl::StatusCode::kUnauthenticated)
                               ? static_cast<absl::StatusCode>(code)
                               : absl::StatusCode::kUnknown;
  return absl::Status(status_code, absl::StrCat(where, ": ", message));
}

absl::Status TcpStore::Set(absl::string_view key, absl::string_view value) {
  return SendOnly(absl::StrCat("Set(", Quoted(key), ")"),
                  std::move(Request(Opcode::kPut).String(key).String(value)).Finish());
}

absl::StatusOr<std::string> TcpStore::Get(absl::string_view key, Deadline deadline) {
  const std::string what = absl::StrCat("Get(", Quoted(key), ")");
  BRAID_ASSIGN_OR_RETURN(
      std::string fields,
      RoundTrip(what,
                std::move(Request(Opcode::kGet).String(key).I64(TimeoutMs(deadline))).Finish(),
                deadline));
  FieldReader reader(fields);
  std::string value;
  if (!reader.String(&value) || reader.remaining() != 0) return MalformedResponse(address_, what);
  return value;
}

absl::StatusOr<int64_t> TcpStore::Add(absl::string_view key, int64_t delta) {
  const std::string what = absl::StrCat("Add(", Quoted(key), ", ", delta, ")");
  BRAID_ASSIGN_OR_RETURN(
      std::string fields,
      RoundTrip(what, std::move(Request(Opcode::kAdd).String(key).I64(delta)).Finish(),
                DeadlineIn(io_timeout_)));
  FieldReader reader(fields);
  int64_t value = 0;
  if (!reader.I64(&value) || reader.remaining() != 0) return MalformedResponse(address_, what);
  return value;
}

absl::StatusOr<std::string> TcpStore::CompareSet(absl::string_view key, absl::string_view expected,
                                                 absl::string_view desired) {
  const std::string what = absl::StrCat("CompareSet(", Quoted(key), ")");
  BRAID_ASSIGN_OR_RETURN(
      std::string fields,
      RoundTrip(what,
                std::move(Request(Opcode::kCompareSet).String(key).String(expected).String(desired))
                    .Finish(),
                DeadlineIn(io_timeout_)));
  FieldReader reader(fields);
  std::string value;
  if (!reader.String(&value) || reader.remaining() != 0) return MalformedResponse(address_, what);
  return value;
}

absl::StatusOr<int64_t> TcpStore::Arrive(absl::string_view key, int64_t count, Deadline deadline) {
  const std::string what = absl::StrCat("Arrive(", Quoted(key), ", ", count, ")");
  BRAID_ASSIGN_OR_RETURN(
      std::string fields,
      RoundTrip(what, std::move(Request(Opcode::kArrive).String(key).I64(count).I64(TimeoutMs(deadline))).Finish(),
                deadline));
  FieldReader reader(fields);
  int64_t arrival = 0;
  if (!reader.I64(&arrival) || reader.remaining() != 0) return MalformedResponse(address_, what);
  return arrival;
}

absl::Status TcpStore::Wait(absl::Span<const std::string> keys, Deadline deadline) {
  const std::string what = absl::StrCat("Wait(", QuotedList(keys), ")");
  FrameWriter request = Request(Opcode::kWait);
  request.U32(static_cast<uint32_t>(keys.size()));
  for (const std::string& key : keys) request.String(key);
  request.I64(TimeoutMs(deadline));
  BRAID_ASSIGN_OR_RETURN(std::string fields,
                         RoundTrip(what, std::move(request).Finish(), deadline));
  if (!fields.empty()) return MalformedResponse(address_, what);
  return absl::OkStatus();
}

absl::StatusOr<bool> TcpStore::Check(absl::Span<const std::string> keys) {
  const std::string what = absl::StrCat("Check(", QuotedList(keys), ")");
  FrameWriter request = Request(Opcode::kCheck);
  request.U32(static_cast<uint32_t>(keys.size()));
  for (const std::string& key : keys) request.String(key);
  BRAID_ASSIGN_OR_RETURN(std::string fields,
                         RoundTrip(what, std::move(request).Finish(), DeadlineIn(io_timeout_)));
  FieldReader reader(fields);
  uint8_t all = 0;
  if (!reader.U8(&all) || reader.remaining() != 0 || all > 1)
    return MalformedResponse(address_, what);
  return all == 1;
}

absl::StatusOr<bool> TcpStore::Delete(absl::string_view key) {
  const std::string what = absl::StrCat("Delete(", Quoted(key), ")");
  BRAID_ASSIGN_OR_RETURN(std::string fields,
                         RoundTrip(what, std::move(Request(Opcode::kDelete).String(key)).Finish(),
                                   DeadlineIn(io_timeout_)));
  FieldReader reader(fields);
  uint8_t existed = 0;
  if (!reader.U8(&existed) || reader.remaining() != 0 || existed > 1) {
    return MalformedResponse(address_, what);
  }
  return existed == 1;
}

absl::StatusOr<int64_t> TcpStore::NumKeys() {
  const std::string what = "NumKeys()";
  BRAID_ASSIGN_OR_RETURN(
      std::string fields,
      RoundTrip(what, std::move(Request(Opcode::kNumKeys)).Finish(), DeadlineIn(io_timeout_)));
  FieldReader reader(fields);
  int64_t count = 0;
  if (!reader.I64(&count) || reader.remaining() != 0) return MalformedResponse(address_, what);
  return count;
}

}  // namespace braid
