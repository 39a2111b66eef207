// Tests of base/status.h: the propagation macros, Annotate and ErrnoStatus.
#include "base/status.h"

#include <cerrno>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "catch2/catch.hpp"

namespace braid {
namespace {

absl::Status ReturnIfError(absl::Status input, int* reached, int* evaluations) {
  BRAID_RETURN_IF_ERROR((++*evaluations, input));
  ++*reached;
  return absl::OkStatus();
}

TEST_CASE("BRAID_RETURN_IF_ERROR returns the error and continues on OK", "[base][status]") {
  int reached = 0;
  int evaluations = 0;
  CHECK(ReturnIfError(absl::OkStatus(), &reached, &evaluations).ok());
  CHECK(reached == 1);
  CHECK(evaluations == 1);

  const absl::Status error = absl::UnavailableError("peer gone");
  CHECK(ReturnIfError(error, &reached, &evaluations) == error);
  CHECK(reached == 1);      // the rest of the function did not run
  CHECK(evaluations == 2);  // the expression ran exactly once
}

absl::StatusOr<int> Twice(absl::StatusOr<int> input) {
  BRAID_ASSIGN_OR_RETURN(const int value, input);
  return 2 * value;
}

absl::StatusOr<std::unique_ptr<int>> MakeBox(int value) {
  if (value < 0) return absl::InvalidArgumentError("negative");
  return std::make_unique<int>(value);
}

absl::StatusOr<int> SumOfBoxes(int a, int b) {
  // Two in one scope (distinct hidden names) and a move-only value.
  BRAID_ASSIGN_OR_RETURN(std::unique_ptr<int> first, MakeBox(a));
  BRAID_ASSIGN_OR_RETURN(auto second, MakeBox(b));
  return *first + *second;
}

absl::StatusOr<std::string> AssignExisting(absl::StatusOr<std::string> input) {
  std::string text = "unchanged";
  BRAID_ASSIGN_OR_RETURN(text, std::move(input));
  return text;
}

TEST_CASE("BRAID_ASSIGN_OR_RETURN assigns the value or returns the error", "[base][status]") {
  CHECK(Twice(21).value() == 42);
  CHECK(Twice(absl::NotFoundError("no key")).status() == absl::NotFoundError("no key"));

  CHECK(SumOfBoxes(2, 3).value() == 5);
  CHECK(SumOfBoxes(-1, 3).status() == absl::InvalidArgumentError("negative"));
  CHECK(SumOfBoxes(1, -3).status() == absl::InvalidArgumentError("negative"));

  CHECK(AssignExisting(std::string("new")).value() == "new");
  CHECK(AssignExisting(absl::AbortedError("stop")).status().code() == absl::StatusCode::kAborted);
}

TEST_CASE("Annotate prepends context and keeps the code", "[base][status]") {
  const absl::Status annotated =
      Annotate(absl::DeadlineExceededError("recv timed out"), "rank 3: allreduce #7");
  CHECK(annotated.code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(annotated.message() == "rank 3: allreduce #7: recv timed out");

  // Twice: the outer layer goes first.
  CHECK(Annotate(annotated, "reducer").message() == "reducer: rank 3: allreduce #7: recv timed out");

  // OK stays OK, with no message.
  CHECK(Annotate(absl::OkStatus(), "context").ok());
  CHECK(Annotate(absl::OkStatus(), "context").message().empty());
}

TEST_CASE("ErrnoStatus maps errno to a code and names what failed", "[base][status]") {
  const absl::Status reset = ErrnoStatus(ECONNRESET, "recv from rank 2");
  CHECK(reset.code() == absl::StatusCode::kUnavailable);
  CHECK(absl::StartsWith(reset.message(), "recv from rank 2: "));
  CHECK(absl::StrContains(reset.message(), "reset"));

  CHECK(ErrnoStatus(ETIMEDOUT, "connect").code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(ErrnoStatus(ENOENT, "open").code() == absl::StatusCode::kNotFound);
  CHECK(ErrnoStatus(EINVAL, "ioctl").code() == absl::StatusCode::kInvalidArgument);
  CHECK(ErrnoStatus(ECONNREFUSED, "connect").code() == absl::StatusCode::kUnavailable);
  CHECK(!ErrnoStatus(0x7fff, "odd").message().empty());  // unknown errno still says something
}

}  // namespace
}  // namespace braid
