// Writes bench_cuda_issue's straight-line baselines (run at build time; bench/CMakeLists.txt).
//
//   gen_straight_line <out.cpp>
//
// For each case of cuda_issue.hpp it binds a cuda::executor over the record driver, records one
// step and writes two functions: step_<case>, whose body is that step's driver calls in order —
// every stream, event, size, peer and communicator a constant, every buffer a pool's base plus a
// constant offset, no loop, no dispatch — and bind_<case>, which fills the stage calls' bound
// ops from the pools once, field for field what the executor bound (captured from the same
// step). The stage calls are `c[k].fn(c[k].obj, c[k], feed)`, as in the executor's step, so the
// compute part costs the same in both and the difference is the issuing.
#include "cuda_issue.hpp"

#include <pipetype/cuda/record.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

namespace {

using namespace pipetype_bench;
namespace pc = pipetype::cuda;
using ck = pc::record_driver::call_kind;

// The executor's stage calls, in order: the bound op each was given and the fn[] slot it came from.
struct captured {
  pt::bound_op op;
  int fn_slot = 0;
};
std::vector<captured> stage_calls;

template <int K>
void capture(void*, const pt::bound_op& op, const pt::step_feed&) {
  stage_calls.push_back({op, K});
}

// What binding made through the record driver: its allocations (a pointer into one is written
// `<pool k> + offset`) and its streams.
struct made {
  std::vector<const std::byte*> base;
  std::vector<std::size_t> bytes;
  std::vector<int> streams;
  struct place {
    std::size_t pool;
    std::ptrdiff_t offset;
  };
  place at(const void* p) const {
    const auto* q = static_cast<const std::byte*>(p);
    for (std::size_t k = 0; k < base.size(); ++k)
      if (q >= base[k] && q < base[k] + bytes[k]) return {k, q - base[k]};
    throw std::runtime_error("gen_straight_line: a buffer outside the pools");
  }
  // `pool[k] + offset` (`p<k> + offset` with a local per pool), or nullptr
  std::string text(const void* p, bool local) const {
    if (p == nullptr) return "nullptr";
    const place x = at(p);
    return (local ? "p" + std::to_string(x.pool) : "pool[" + std::to_string(x.pool) + "]") + " + " +
           std::to_string(x.offset);
  }
};

template <class T>
std::string num(T v) {
  return std::to_string(v);
}

// bind_<name>: c[k] = the k-th stage call's bound op, its non-default fields one by one.
void write_bind(std::ostream& out, const std::string& name, const std::vector<pt::stage_entry>& entries, const made& m,
                const pc::record_driver& rec) {
  auto entry_of = [&](auto pick, auto value) {  // the entry whose field `pick` holds `value`
    for (std::size_t j = 0; j < entries.size(); ++j)
      if (pick(entries[j]) == value) return std::to_string(j);
    throw std::runtime_error("gen_straight_line: a stage call whose object or function is no stage's");
  };
  out << "void bind_" << name
      << "([[maybe_unused]] counting_driver& d, [[maybe_unused]] std::byte* const* pool,\n"
         "    [[maybe_unused]] const pt::stage_entry* e, [[maybe_unused]] pt::bound_op* c) {\n";
  const pt::bound_op z{};
  for (std::size_t k = 0; k < stage_calls.size(); ++k) {
    const pt::bound_op& o = stage_calls[k].op;
    const std::string c = "  c[" + std::to_string(k) + "].";
    auto field = [&](const char* f, bool differs, const std::string& v) {
      if (differs) out << c << f << " = " << v << ";\n";
    };
    auto ptr = [&](const char* f, const std::byte* p, const std::byte* p0) { field(f, p != p0, m.text(p, false)); };
    field("code", o.code != z.code, "static_cast<pipetype::op_code>(" + num(static_cast<int>(o.code)) + ")");
    field("what", o.what != z.what, "static_cast<pipetype::kind>(" + num(static_cast<int>(o.what)) + ")");
    field("record", o.record != z.record, o.record ? "true" : "false");
    field("wait", o.wait != z.wait, num(o.wait));
    field("end", o.end != z.end, num(o.end));
    field("stage", o.stage != z.stage, num(o.stage));
    field("microbatch", o.microbatch != z.microbatch, num(o.microbatch));
    field("add_count", o.add_count != z.add_count, num(o.add_count));
    const std::string fn_entry = entry_of([](const pt::stage_entry& s) { return s.obj; }, o.obj);
    field("fn", true, "e[" + fn_entry + "].fn[" + num(stage_calls[k].fn_slot) + "]");
    field("obj", true, "e[" + fn_entry + "].obj");
    field("entry", true, "&e[" + fn_entry + "]");
    ptr("in", o.in, z.in);
    ptr("out", o.out, z.out);
    ptr("grad_out", o.grad_out, z.grad_out);
    ptr("grad_in", o.grad_in, z.grad_in);
    ptr("stash", o.stash, z.stash);
    ptr("weight_grad", o.weight_grad, z.weight_grad);
    if (o.add != z.add)
      field("add", true, "e[" + entry_of([](const pt::stage_entry& s) { return s.add; }, o.add) + "].add");
    field("add_begin", o.add_begin != z.add_begin, num(o.add_begin));
    field("index", o.index != z.index, num(o.index));
    field("plan_stage", o.plan_stage != z.plan_stage, num(o.plan_stage));
    if (o.stream != z.stream) {
      const auto s = std::find_if(m.streams.begin(), m.streams.end(), [&](int x) { return rec.native(x) == o.stream; });
      if (s == m.streams.end()) throw std::runtime_error("gen_straight_line: a stage call's stream is no stream's");
      field("stream", true, "d.native(" + num(*s) + ")");
    }
    field("peer", o.peer != z.peer, num(o.peer));
    field("comm", o.comm != z.comm, num(o.comm));
    ptr("buf", o.buf, z.buf);
    field("bytes", o.bytes != z.bytes, num(o.bytes));
    field("feed", o.feed != z.feed, num(o.feed));
  }
  out << "}\n\n";
}

// step_<name>: the recorded calls, in order.
void write_step(std::ostream& out, const std::string& name, const std::vector<pc::record_driver::call>& calls,
                const made& m) {
  std::ostringstream body;
  std::vector<bool> used(m.base.size(), false);
  auto buf = [&](const void* p) {
    if (p) used[m.at(p).pool] = true;
    return m.text(p, true);
  };
  std::string indent = "  ";
  int k = 0;  // stage calls so far
  for (const auto& c : calls) switch (c.what) {
      case ck::wait:
        body << indent << "d.wait(" << c.stream << ", " << c.event << ");\n";
        break;
      case ck::record:
        body << indent << "d.record(" << c.event << ", " << c.stream << ");\n";
        break;
      case ck::group_start:
        body << indent << "d.group_start();\n";
        indent = "    ";
        break;
      case ck::group_end:
        indent = "  ";
        body << indent << "d.group_end();\n";
        break;
      case ck::send:
      case ck::recv:
        body << indent << (c.what == ck::send ? "d.send(" : "d.recv(") << buf(c.ptr) << ", " << c.bytes << ", "
             << c.peer << ", " << c.comm << ", " << c.stream << ");\n";
        break;
      case ck::compute:
        body << indent << "c[" << k << "].fn(c[" << k << "].obj, c[" << k << "], feed);  // " << c.stage << c.kind
             << c.microbatch << "\n";
        ++k;
        break;
      default:
        throw std::runtime_error("gen_straight_line: a step made a call that is no issuing call");
    }
  if (k != static_cast<int>(stage_calls.size()))
    throw std::runtime_error("gen_straight_line: the stage calls and the recorded computes differ");
  out << "void step_" << name
      << "([[maybe_unused]] counting_driver& d, [[maybe_unused]] std::byte* const* pool,\n"
         "    [[maybe_unused]] const pt::bound_op* c, [[maybe_unused]] const pt::step_feed& feed) {\n";
  for (std::size_t p = 0; p < used.size(); ++p)
    if (used[p]) out << "  std::byte* const p" << p << " = pool[" << p << "];\n";
  out << body.str() << "}\n\n";
}

// Both functions of one case, and its entry of the table straight_line_of reads.
std::string write_case(std::ostream& out, int which) {
  const std::string name = case_names[which];
  const pipetype::runtime_plan plan = plan_of(which);
  auto model = model_of(plan);
  pc::record_driver rec;
  std::vector<pt::stage_entry> entries = pt::entries_of(model);
  for (const pt::stage_entry& e : entries)
    if (e.add != nullptr)  // the executor's adds of held weight gradients are no driver calls
      throw std::runtime_error("gen_straight_line: a stage with a weight_grad, whose adds a straight line would miss");
  std::vector<pt::stage_entry> capturing = entries;
  for (pt::stage_entry& e : capturing) {
    const pt::stage_fn by_slot[] = {&capture<0>, &capture<1>, &capture<2>, &capture<3>};
    for (int s = 0; s < pipetype::kind_count; ++s)
      if (e.fn[s]) e.fn[s] = by_slot[s];
  }
  pc::executor ex{pipetype::views_of(plan),
                  capturing,
                  rec,
                  {.rank = bench_rank, .comms = std::vector<int>(plan.lowered().comms.size(), 0)}};
  made m;
  for (const auto& c : rec.calls())
    if (c.what == ck::allocate) {
      m.base.push_back(static_cast<const std::byte*>(c.ptr));
      m.bytes.push_back(c.bytes);
    } else if (c.what == ck::make_stream) {
      m.streams.push_back(c.stream);
    }
  rec.clear();
  stage_calls.clear();
  const std::vector<float> batch = batch_of(plan);
  ex.step(batch.data());

  out << "// ---- " << name << ": rank " << bench_rank << ", " << ex.ops() << " ops, " << rec.calls().size()
      << " driver calls, " << stage_calls.size() << " of them stage calls\n\n";
  out << "constexpr std::size_t pools_" << name << "[] = {";
  for (std::size_t p = 0; p < m.bytes.size(); ++p) out << (p ? ", " : "") << m.bytes[p];
  out << "};\n\n";
  write_bind(out, name, entries, m, rec);
  write_step(out, name, rec.calls(), m);
  return "{" + std::to_string(ex.ops()) + ", pools_" + name + ", " + std::to_string(stage_calls.size()) + ", &bind_" +
         name + ", &step_" + name + "}";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: gen_straight_line <out.cpp>\n");
    return 2;
  }
  try {
    std::ostringstream out;
    out << "// Generated by bench/gen_straight_line.cpp at build time; do not edit.\n"
           "// bench_cuda_issue's straight-line baselines: each case's step as the driver calls the\n"
           "// executor makes, written out in order.\n"
           "#include \"cuda_issue.hpp\"\n\n"
           "namespace pipetype_bench {\n"
           "namespace {\n\n"
           "namespace pt = pipetype;\n\n";
    std::string table;
    for (int which = 0; which < case_count; ++which) table += "      " + write_case(out, which) + ",\n";
    out << "}  // namespace\n\n"
           "const straight_line& straight_line_of(int which) {\n"
           "  static const straight_line cases[] = {\n"
        << table
        << "  };\n"
           "  return cases[which];\n"
           "}\n\n"
           "}  // namespace pipetype_bench\n";
    std::ofstream f(argv[1]);
    f << out.str();
    if (!f) throw std::runtime_error(std::string("gen_straight_line: cannot write ") + argv[1]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
