#include "daemon/negotiation/round_vote.h"

#include <cstring>
#include <vector>

#include "catch2/catch.hpp"
#include "daemon/negotiation/steady_rounds_test_util.h"

namespace ard::negotiation::testing {
namespace {

TEST_CASE("votes survive the wire and combine the same way in any order") {
  RoundVote a{7, 70, 3, kFusion, {0b101, 1}, {0b010, 0}, 7, 70};
  RoundVote b{7, 70, 5, 4096, {0b110, 1}, {0b001, 2}, 7, 70};
  std::vector<uint8_t> bytes(VoteBytes(70));
  EncodeVote(a, bytes.data());
  RoundVote back = DecodeVote(bytes.data(), 70);
  CHECK(back.ready == a.ready);
  CHECK(back.to_coordinator == a.to_coordinator);
  CHECK(back.lists == 3);
  RoundVote ab = a, ba = b;
  CombineVotes(ab, b);
  CombineVotes(ba, a);
  for (const RoundVote* v : {&ab, &ba}) {
    CHECK(v->ready == std::vector<uint64_t>{0b100, 1});
    CHECK(v->to_coordinator == std::vector<uint64_t>{0b011, 2});
    CHECK(v->lists == 5);
    CHECK(v->fusion_threshold_bytes == 4096);
  }
}

// A vote on one carried slot of `c` with `value` in it, ready or not.
template <typename T>
RoundVote OneSlot(const CarriedSlot& c, bool ready, T value) {
  RoundVote v{1, 1, 0, kFusion, {ready ? 1u : 0u}, {0}, 1, 1};
  v.data.assign(8, 0xEE);
  std::memcpy(v.data.data() + c.offset, &value, sizeof(value));
  return v;
}

TEST_CASE("the combine reduces a slot's data only where both sides are ready, lower op higher") {
  const TestReducer reducer;
  const CarriedSlot ints{0, 0, 4, DataType::kInt32, ReduceOp::kSum};
  // A side that is not ready holds garbage: never reduced (INT32_MAX + anything), zeroed.
  for (bool mine_ready : {true, false}) {
    RoundVote mine = OneSlot(ints, mine_ready, INT32_MAX);
    RoundVote theirs = OneSlot(ints, !mine_ready, INT32_MAX);
    CombineVotes(mine, theirs, {ints}, &reducer, mine_ready);
    CHECK(mine.ready[0] == 0);
    CHECK(mine.data == std::vector<uint8_t>{0, 0, 0, 0, 0xEE, 0xEE, 0xEE, 0xEE});
  }
  RoundVote two = OneSlot(ints, true, int32_t{2});
  CombineVotes(two, OneSlot(ints, true, int32_t{3}), {ints}, &reducer, true);
  int32_t five;
  std::memcpy(&five, two.data.data(), 4);
  CHECK(five == 5);
  CHECK(two.ready[0] == 1);
  // min(-0, +0) keeps its first operand: the order shows in the bits. Whichever side combines,
  // the result is (lower op higher).
  const CarriedSlot floats{0, 0, 4, DataType::kFloat32, ReduceOp::kMin};
  const float lower = -0.0f, higher = +0.0f;
  float expected = lower, reversed = higher;
  reducer.ReduceInto(reinterpret_cast<uint8_t*>(&expected),
                     reinterpret_cast<const uint8_t*>(&higher), 1, DataType::kFloat32,
                     ReduceOp::kMin);
  reducer.ReduceInto(reinterpret_cast<uint8_t*>(&reversed),
                     reinterpret_cast<const uint8_t*>(&lower), 1, DataType::kFloat32,
                     ReduceOp::kMin);
  REQUIRE(std::memcmp(&expected, &reversed, 4) != 0);
  RoundVote at_lower = OneSlot(floats, true, lower), at_higher = OneSlot(floats, true, higher);
  const RoundVote from_lower = at_lower, from_higher = at_higher;
  CombineVotes(at_lower, from_higher, {floats}, &reducer, /*mine_is_lower=*/true);
  CombineVotes(at_higher, from_lower, {floats}, &reducer, /*mine_is_lower=*/false);
  CHECK(std::memcmp(at_lower.data.data(), &expected, 4) == 0);
  CHECK(std::memcmp(at_higher.data.data(), &expected, 4) == 0);
}

}  // namespace
}  // namespace ard::negotiation::testing
