#include "sim/compact_plan.h"

#include <utility>

namespace braid::sim {
namespace {

bool SameMemory(const Region& a, const Region& b) {
  return a.buffer == b.buffer && a.begin == b.begin && a.rank == b.rank;
}

uint64_t Mix(uint64_t hash, uint64_t value) {
  hash ^= value + 0x9e3779b97f4a7c15ULL + (hash << 6) + (hash >> 2);
  return hash;
}

uint64_t HashOf(const CompactPlan& plan) {
  uint64_t hash = plan.ops.size();
  for (const CompactOp& op : plan.ops) {
    hash = Mix(hash, static_cast<uint64_t>(op.kind) | uint64_t{op.transfers} << 8 | uint64_t{op.first} << 32);
    hash = Mix(hash, op.bytes);
  }
  for (const CompactTransfer& t : plan.transfers) {
    hash = Mix(hash, uint64_t{t.offset} << 1 | (t.send ? 1 : 0));
    hash = Mix(hash, t.bytes);
  }
  for (uint32_t begin : plan.lane_begin) hash = Mix(hash, begin);
  for (const LevelStep& step : plan.steps) {
    hash = Mix(hash, step.count ^ uint64_t{step.level} << 56 ^ uint64_t(step.kind) << 48);
  }
  return hash;
}

}  // namespace

bool CompactPlan::operator==(const CompactPlan& other) const {
  if (ops != other.ops || lane_begin != other.lane_begin || transfers != other.transfers ||
      lane_window != other.lane_window) {
    return false;
  }
  if (steps.size() != other.steps.size()) return false;
  for (size_t i = 0; i < steps.size(); ++i) {
    const LevelStep& a = steps[i];
    const LevelStep& b = other.steps[i];
    if (a.level != b.level || a.kind != b.kind || a.count != b.count || a.root != b.root) return false;
  }
  return true;
}

CompactPlan Compact(const Plan& plan, int rank, int size, size_t element_size) {
  CompactPlan out;
  out.lane_window = plan.lane_window;
  out.lane_begin.reserve(plan.lanes.size() + 1);
  for (const std::vector<Op>& lane : plan.lanes) {
    out.lane_begin.push_back(static_cast<uint32_t>(out.ops.size()));
    for (const Op& op : lane) {
      CompactOp c;
      c.kind = op.kind;
      if (op.kind == Op::Kind::kGroup) {
        c.first = static_cast<uint32_t>(out.transfers.size());
        for (const Transfer& t : op.transfers) {
          if (t.region.count == 0) continue;
          const uint32_t offset = static_cast<uint32_t>(((t.peer - rank) % size + size) % size);
          out.transfers.push_back({offset, t.send, t.region.count * element_size});
        }
        c.transfers = static_cast<uint32_t>(out.transfers.size()) - c.first;
        if (c.transfers == 0) continue;
      } else if (op.kind == Op::Kind::kStep) {
        c.first = static_cast<uint32_t>(out.steps.size());
        out.steps.push_back(op.step);
      } else {
        if (op.kind == Op::Kind::kCopy && SameMemory(op.dst, op.a)) continue;
        c.bytes = op.dst.count * element_size;
        if (c.bytes == 0) continue;
      }
      out.ops.push_back(c);
    }
  }
  out.lane_begin.push_back(static_cast<uint32_t>(out.ops.size()));
  return out;
}

std::shared_ptr<const CompactPlan> PlanStore::Add(CompactPlan plan) {
  std::vector<std::shared_ptr<const CompactPlan>>& same_hash = by_hash_[HashOf(plan)];
  for (const std::shared_ptr<const CompactPlan>& kept : same_hash) {
    if (*kept == plan) return kept;
  }
  same_hash.push_back(std::make_shared<const CompactPlan>(std::move(plan)));
  ++distinct_;
  return same_hash.back();
}

}  // namespace braid::sim
