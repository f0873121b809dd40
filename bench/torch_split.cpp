// What a module stage's split backward costs (include/pipetype/torch/stage.hpp, docs/14): for
// stages of 1, 2 and 4 GPT-2 blocks written in torch::nn, the median time of a full backward (B),
// of backward_input (I) and backward_weight (W) as the adapter runs them, and of the naive split
// (two autograd calls, the second from the outputs again) and of its first call alone (naive I:
// what an input gradient costs with nothing kept for W), each after a fresh forward. Target:
// I + W ≤ 1.10 × B. One intra-op thread (the host executor runs one thread per rank).
//
// What costs more than it should is memory, not work: the gradients I keeps for W hold memory
// that glibc's malloc would otherwise reuse, so later gradients land on fresh pages (page faults,
// cold caches). --keep-memory tells malloc to keep what it frees (mallopt: no mmap for large
// blocks, no trimming), as a caching allocator (jemalloc, tcmalloc) does; docs/14 has both tables.
//
//   ./build/release/bench/bench_torch_split [--reps N] [--keep-memory]
#include <pipetype/torch/stage.hpp>

#include <torch/torch.h>

#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace pt = pipetype;

namespace {

// One pre-norm decoder block: x + attn(ln1(x)), then + mlp(ln2(x)); causal attention.
struct blockImpl : torch::nn::Module {
  blockImpl(std::int64_t c, std::int64_t h)
      : heads(h),
        ln1(register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c})))),
        ln2(register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c})))),
        qkv(register_module("qkv", torch::nn::Linear(c, 3 * c))),
        proj(register_module("proj", torch::nn::Linear(c, c))),
        fc(register_module("fc", torch::nn::Linear(c, 4 * c))),
        out(register_module("out", torch::nn::Linear(4 * c, c))) {}
  at::Tensor forward(const at::Tensor& x) {
    const std::int64_t b = x.size(0), t = x.size(1), c = x.size(2), d = c / heads;
    const auto parts = qkv->forward(ln1->forward(x)).chunk(3, -1);
    const auto split = [&](const at::Tensor& y) { return y.view({b, t, heads, d}).transpose(1, 2); };
    const at::Tensor q = split(parts[0]), k = split(parts[1]), v = split(parts[2]);
    at::Tensor att = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(d));
    att = att.masked_fill(torch::ones({t, t}, torch::kBool).triu(1), -1e9).softmax(-1);
    const at::Tensor y = torch::matmul(att, v).transpose(1, 2).reshape({b, t, c});
    const at::Tensor h = x + proj->forward(y);
    return h + out->forward(torch::gelu(fc->forward(ln2->forward(h))));
  }
  std::int64_t heads;
  torch::nn::LayerNorm ln1, ln2;
  torch::nn::Linear qkv, proj, fc, out;
};
TORCH_MODULE(block);

using hidden = pt::tensor<float, pt::dynamic>;
using stage_t = pt::torch::module_stage<hidden, hidden>;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 15;
  bool keep = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) {
      reps = std::max(3, std::atoi(argv[++i]));
    } else if (a == "--keep-memory") {
      keep = true;
      mallopt(M_MMAP_THRESHOLD, 1 << 30);
      mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
    } else {
      std::fprintf(stderr, "usage: bench_torch_split [--reps N] [--keep-memory]\n");
      return a == "--help" ? 0 : 2;
    }
  }
  at::set_num_threads(1);
  std::printf("split backward of LibTorch stages (GPT-2 blocks, one intra-op thread%s), median of %d, ms\n",
              keep ? ", malloc keeps what it frees" : "", reps);
  std::printf("%-26s %7s %7s %7s %7s %9s %13s %7s\n", "stage", "F", "B", "I", "W", "(I+W)/B", "naive (I+W)/B",
              "naive I");
  struct shape {
    std::int64_t rows, seq, width, heads;
  };
  for (const shape s : {shape{4, 64, 128, 4}, shape{4, 128, 256, 8}}) {
    for (const int blocks : {1, 2, 4}) {
      torch::manual_seed(1);
      torch::nn::Sequential seq;
      for (int k = 0; k < blocks; ++k) seq->push_back(block(s.width, s.heads));
      const std::vector<std::int64_t> dims{s.rows, s.seq, s.width};
      stage_t st(seq.ptr(), [seq](const std::vector<at::Tensor>& x) mutable { return std::vector<at::Tensor>{seq->forward(x[0])}; },
                 {.name = "blocks", .inputs = {{dims}}, .outputs = {{dims}}});
      const std::size_t n = static_cast<std::size_t>(s.rows * s.seq * s.width);
      std::vector<float> x(n), y(n), gy(n), gx(n), wg(st.weight_grad_extent());
      {
        const at::Tensor r = torch::randn({static_cast<std::int64_t>(2 * n)});
        std::memcpy(x.data(), r.data_ptr<float>(), n * sizeof(float));
        std::memcpy(gy.data(), r.data_ptr<float>() + n, n * sizeof(float));
      }
      using clock = std::chrono::steady_clock;
      const auto ms = [](clock::time_point a, clock::time_point b) {
        return std::chrono::duration<double, std::milli>(b - a).count();
      };
      const auto fwd = [&](int j) {
        pt::forward_ctx<stage_t> c;
        c.microbatch = j;
        c.input = x;
        c.output = y;
        st.forward(c);
      };
      const auto bwd_ctx = [&](int j, bool input, bool weight) {
        pt::backward_ctx<stage_t> c;
        c.microbatch = j;
        c.input = x;
        c.grad_output = gy;
        if (input) c.grad_input = gx;
        if (weight) c.weight_grad = wg;
        return c;
      };
      std::vector<double> f, b, i, w, naive, naive_i;
      for (int r = 0; r < reps + 2; ++r) {  // the first two warm up
        auto t0 = clock::now();
        fwd(r);
        auto t1 = clock::now();
        st.backward(bwd_ctx(r, true, true));
        auto t2 = clock::now();
        fwd(r);
        auto t3 = clock::now();
        st.backward_input(bwd_ctx(r, true, false));
        auto t4 = clock::now();
        st.backward_weight(bwd_ctx(r, false, true));
        auto t5 = clock::now();
        // the naive split: inputs, graph kept, then parameters from the outputs again
        const at::Tensor xin = torch::from_blob(x.data(), dims).clone().requires_grad_(true);
        const at::Tensor yout = seq->forward(xin);
        const at::Tensor g = torch::from_blob(gy.data(), dims);
        auto t6 = clock::now();
        torch::autograd::grad({yout}, {xin}, {g}, true);
        auto t6b = clock::now();
        torch::autograd::grad({yout}, seq->parameters(), {g});
        auto t7 = clock::now();
        if (r >= 2) naive_i.push_back(ms(t6, t6b));
        if (r < 2) continue;
        f.push_back(ms(t0, t1));
        b.push_back(ms(t1, t2));
        i.push_back(ms(t3, t4));
        w.push_back(ms(t4, t5));
        naive.push_back(ms(t6, t7));
      }
      const double B = median(b), I = median(i), W = median(w), N = median(naive);
      char name[64];
      std::snprintf(name, sizeof name, "%d x (T=%lld, C=%lld)", blocks, static_cast<long long>(s.seq),
                    static_cast<long long>(s.width));
      std::printf("%-26s %7.2f %7.2f %7.2f %7.2f %9.2f %13.2f %7.2f%s\n", name, median(f), B, I, W, (I + W) / B, N / B, median(naive_i),
                  st.split_exact() ? "" : "  (W from the outputs)");
    }
  }
  return 0;
}
