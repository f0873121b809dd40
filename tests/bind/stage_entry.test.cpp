// bind/stage_entry.hpp: a stage erased to function pointers and extents.
#include <pipetype/bind/stage_entry.hpp>
#include <pipetype/pipetype.hpp>

#include <doctest/doctest.h>

#include <span>
#include <vector>

namespace {  // this file's names are its own in a unity build (tests/CMakeLists.txt)
namespace test_stage_entry {

namespace pt = pipetype;

namespace {

struct full {  // a full backward, accumulates its own gradients
  using input = pt::tensor<float, 8>;
  using output = pt::tensor<double, 3>;
  using stash = pt::tensor<int, 5>;
  int calls = 0;
  void forward(const pt::forward_ctx<full>& c) {
    ++calls;
    c.output[0] = static_cast<double>(c.input[0]) + c.microbatch;
  }
  void backward(const pt::backward_ctx<full>&) { calls += 10; }
};

struct split {  // I and W apart, hands its weight gradients to pipetype
  using input = pt::tensor<float, 4>;
  using output = pt::tensor<float, 4>;
  using weight_grad = pt::tensor<float, 2>;
  float acc[2] = {};
  std::span<float> weight_gradients() { return acc; }
  void forward(const pt::forward_ctx<split>&) {}
  void backward_input(const pt::backward_ctx<split>&) {}
  void backward_weight(const pt::backward_ctx<split>& c) { c.weight_grad[0] = 1.5f, c.weight_grad[1] = 2.5f; }
};

}  // namespace

TEST_CASE("stage_entry: a stage_entry carries the stage's kinds, extents and element sizes") {
  pt::chain<full> a;
  const std::vector<pt::stage_entry> ea = pt::entries_of(a);
  REQUIRE(ea.size() == 1);
  const pt::stage_entry& e = ea[0];
  CHECK(e.obj == &a.stage<0>());
  CHECK(e.in.count == 1);
  CHECK(e.in.t[0].elems == 8);
  CHECK(e.in.t[0].size == sizeof(float));
  CHECK(e.in_bytes() == 8 * sizeof(float));
  CHECK(e.out_bytes() == 3 * sizeof(double));
  CHECK(e.stash_bytes() == 5 * sizeof(int));
  CHECK(!e.split);
  CHECK((e.add == nullptr));
  CHECK((e.fn[static_cast<int>(pt::kind::F)] != nullptr));
  CHECK((e.fn[static_cast<int>(pt::kind::B)] != nullptr));
  CHECK((e.fn[static_cast<int>(pt::kind::I)] == nullptr));

  pt::chain<split> b;
  split& s = b.stage<0>();
  const pt::stage_entry w = pt::entries_of(b)[0];
  CHECK(w.split);
  CHECK((w.fn[static_cast<int>(pt::kind::W)] != nullptr));
  CHECK((w.add != nullptr));
  CHECK(w.weight_grad_bytes() == 2 * sizeof(float));
  // the add function sums a held gradient into the stage's accumulator
  const float g[2] = {1, 2};
  w.add(w.obj, reinterpret_cast<const std::byte*>(g), nullptr);
  w.add(w.obj, reinterpret_cast<const std::byte*>(g), nullptr);
  CHECK(s.acc[0] == 2);
  CHECK(s.acc[1] == 4);
}

TEST_CASE("stage_entry: a bound op calls the stage with its typed context") {
  pt::chain<full> a;
  const full& f = a.stage<0>();
  const pt::stage_entry e = pt::entries_of(a)[0];
  float batch[16] = {};
  batch[8] = 7;  // microbatch 1's first element (stage 0 reads the batch when `in` is null)
  double out[3] = {};
  pt::bound_op op;
  op.what = pt::kind::F;
  op.stage = 0;
  op.microbatch = 1;
  op.entry = &e;
  op.feed = 0;
  op.fn = e.fn[static_cast<int>(pt::kind::F)];
  op.obj = e.obj;
  op.out = reinterpret_cast<std::byte*>(out);
  const pt::feed_tensor source{reinterpret_cast<const std::byte*>(batch), 8 * sizeof(float)};
  op.fn(op.obj, op, pt::step_feed{&source});
  CHECK(f.calls == 1);
  CHECK(out[0] == 8.0);  // 7 + microbatch 1
}

}  // namespace test_stage_entry
}  // namespace
