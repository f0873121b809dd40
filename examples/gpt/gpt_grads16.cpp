// examples/gpt/gpt_grads16.cpp — examples/gpt's run (train.hpp) with 16-bit weight gradients
// (--grad-dtype fp16, bf16): a unit of its own, so that its two mesh executors compile beside
// gpt.cpp's float one.
#include "train.hpp"

namespace gpt {

template int train<pipetype::half>(run_args&, const examples::cli&);
template int train<pipetype::bfloat16>(run_args&, const examples::cli&);

}  // namespace gpt
