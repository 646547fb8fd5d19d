#pragma once
// The tensor state machine of PatrickStar (with ColossalAI Gemini's READY_FOR_REDUCE).
//
//   FREE            no payload is needed (a non-owned ZeRO-3 chunk between uses)
//   HOLD            payload is valid and kept, not in use
//   COMPUTE         ops are reading or writing it right now: its chunk must not move. Several
//                   users may hold it at once (the tied wte is read by the embedding and the
//                   head; several micro-batches in flight), so the store keeps a count and the
//                   tensor leaves COMPUTE when the count returns to zero.
//   HOLD_AFTER_FWD  used by the forward pass of this step, not needed again until backward
//   HOLD_AFTER_BWD  used by the backward pass of this step
//   READY_FOR_REDUCE  its gradient is complete for every micro-batch of the step
//
// A chunk may move between host and device only when none of its tensors is COMPUTE, and a
// non-owned chunk may be released when all its tensors are HOLD_AFTER_FWD / HOLD_AFTER_BWD
// (or FREE).

#include <string_view>

namespace tide {

enum class TensorState : unsigned char {
  FREE,
  HOLD,
  COMPUTE,
  HOLD_AFTER_FWD,
  HOLD_AFTER_BWD,
  READY_FOR_REDUCE,
};

std::string_view tensor_state_name(TensorState s);

// Whether `from -> to` is a legal transition. FREE -> COMPUTE is legal (the chunk is fetched
// first); anything -> FREE is legal (release); COMPUTE is left only to a HOLD* state.
bool is_legal_transition(TensorState from, TensorState to);

}  // namespace tide
