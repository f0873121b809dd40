// pipetype/graph/tensors.hpp — what travels over an edge: one tensor, or a set of them.
//
// A stage's `input` and `output` are either one tensor
//
//   using input = pipetype::tensor<float, 4, 64>;          // 256 floats per microbatch
//
// or a set of tensors, each with its own element type and extent, each carrying a gradient back
// unless it is marked no_grad:
//
//   using input = pipetype::tensors<pipetype::tensor<float, pipetype::dynamic>,           // hidden states
//                                   pipetype::no_grad<pipetype::tensor<std::int32_t, 64>>>;  // token ids
//
// The stage's context then holds one span per tensor, in declaration order: `c.input.get<0>()`,
// or `auto [h, ids] = c.input;`. The gradient the stage writes for its input (`c.grad_input`) has
// the same shape, with an empty span for every no_grad tensor; the gradient it receives for its
// output (`c.grad_output`) likewise. A single tensor stays what it always was: a plain std::span.
//
// In memory an edge is one block of bytes per microbatch: its tensors in declaration order, each
// starting at a multiple of 64 bytes; its gradient is a second block holding only the tensors
// that carry one, packed the same way. One transfer moves a block (an activation: all of it; a
// gradient: only the gradient tensors, zero bytes when none has one), so a set costs the plan
// nothing: the lowering and its proofs see an edge, as before, and the bind layer sizes its
// slots in bytes. Sizes are 64-bit throughout: an extent may be 2^33 elements or more.
#pragma once

#include <array>
#include <cstddef>
#include <span>
#include <tuple>
#include <type_traits>

namespace pipetype {

/// An extent known only at run time (see the stage's *_extent() members).
inline constexpr std::size_t dynamic = std::dynamic_extent;

/// Element type and elements per microbatch of an activation (the product of `Extents`).
template <class T, std::size_t... Extents>
struct tensor {
  static_assert(std::is_trivially_copyable_v<T>, "pipetype::tensor: elements travel as bytes");
  using value_type = T;
  static constexpr bool is_dynamic = ((Extents == dynamic) || ...);
  static constexpr std::size_t extent = is_dynamic ? dynamic : (std::size_t{1} * ... * Extents);
};

/// A tensor of a set whose gradient does not flow back (token ids, masks, positions, lengths).
template <class Tensor>
struct no_grad {
  using type = Tensor;
};

/// A tensor whose extent varies per microbatch (a sequence length): its declared extent E is the
/// most it holds; when a step's batch gives lengths (batch::lengths(lens, max)), microbatch j
/// holds E · lens[j] / max elements, the first ones of its slot, and only those travel. Combines
/// with no_grad either way round: no_grad<varying<tensor<...>>>.
template <class Tensor>
struct varying {
  using type = Tensor;
};

/// A set of tensors travelling over one edge together: each a tensor<...>, a no_grad<...> or a
/// varying<...> of one (or both: no_grad<varying<tensor<...>>>).
template <class... Members>
struct tensors {};

/// The most tensors one set may hold.
inline constexpr int max_set_tensors = 8;

/// One input type per incoming edge, in edge order, for a stage of a graph whose inputs differ
/// (an image tower and a token tower into one head): `using inputs = pipetype::per_edge<A, B>;`
/// with each a tensor<...> or a tensors<...> set. The stage's `input` is then the first.
template <class... X>
struct per_edge {};

/// The most incoming edges with types of their own (per_edge) a stage may have.
inline constexpr int max_edge_inputs = 8;

namespace detail {

template <class T>
struct is_tensor : std::false_type {};
template <class T, std::size_t... E>
struct is_tensor<tensor<T, E...>> : std::true_type {};

/// One member of a set: its tensor, whether a gradient flows back over it and whether its extent
/// varies per microbatch.
template <class M>
struct member_of {
  using tensor_type = M;
  static constexpr bool grad = true, varies = false;
  static constexpr bool valid = is_tensor<M>::value;
};
template <class M>
struct member_of<no_grad<M>> : member_of<M> {
  static constexpr bool grad = false;
  static constexpr bool valid = member_of<M>::valid && member_of<M>::grad;  // no no_grad<no_grad<...>>
};
template <class M>
struct member_of<varying<M>> : member_of<M> {
  static constexpr bool varies = true;
  static constexpr bool valid = member_of<M>::valid && !member_of<M>::varies;
};

/// What a stage's `input`/`output` declares, as a list of members. `single`: a plain tensor (its
/// context views are std::spans); `valid`: a tensor, or a set of (no_grad) tensors, at most
/// max_set_tensors of them.
template <class X>
struct set_traits {
  static constexpr bool valid = false, single = false;
  static constexpr int count = 0;
};
template <class T, std::size_t... E>
struct set_traits<tensor<T, E...>> {
  static constexpr bool valid = true, single = true;
  static constexpr int count = 1;
  using members = std::tuple<member_of<tensor<T, E...>>>;
};
template <class T, std::size_t... E>
struct set_traits<varying<tensor<T, E...>>> {
  static constexpr bool valid = true, single = true;
  static constexpr int count = 1;
  using members = std::tuple<member_of<varying<tensor<T, E...>>>>;
};
template <class... M>
struct set_traits<tensors<M...>> {
  static constexpr bool valid = sizeof...(M) > 0 && sizeof...(M) <= max_set_tensors && (member_of<M>::valid && ...);
  static constexpr bool single = false;
  static constexpr int count = static_cast<int>(sizeof...(M));
  using members = std::tuple<member_of<M>...>;
};

template <class X, std::size_t K>
using member_t = std::tuple_element_t<K, typename set_traits<X>::members>;
template <class X, std::size_t K>
using tensor_t = typename member_t<X, K>::tensor_type;

template <class X>
inline constexpr bool is_tensor_set_v = set_traits<X>::valid;

template <class P>
struct per_edge_traits {
  static constexpr bool valid = false;
  static constexpr int count = 0;
};
template <class... X>
struct per_edge_traits<per_edge<X...>> {
  static constexpr bool valid = sizeof...(X) > 0 && sizeof...(X) <= max_edge_inputs && (is_tensor_set_v<X> && ...);
  static constexpr int count = static_cast<int>(sizeof...(X));
  using types = std::tuple<X...>;
};

}  // namespace detail

/// One span per tensor of a set, in declaration order: `v.get<K>()`, or `auto [a, b] = v;`.
template <class... Spans>
class span_set {
 public:
  constexpr span_set() = default;
  constexpr explicit span_set(Spans... s) noexcept : s_{s...} {}
  template <std::size_t K>
  constexpr std::tuple_element_t<K, std::tuple<Spans...>> get() const noexcept {
    return std::get<K>(s_);
  }
  static constexpr std::size_t size() noexcept { return sizeof...(Spans); }

 private:
  std::tuple<Spans...> s_;
};

/// Where one tensor of an edge's block lies: its elements, element size and byte offset in the
/// activation block, and (grad) its byte offset in the gradient block.
struct tensor_place {
  std::size_t elems = 0, size = 0, offset = 0, grad_offset = 0;
  bool grad = true;
  bool varies = false;         // its extent varies per microbatch (varying<...>): `elems` is the most
  const void* type = nullptr;  // the element type's identity (detail::type_id)
  constexpr std::size_t bytes() const { return elems * size; }
};

/// The bytes of an edge per microbatch: its tensors' places, the activation block and the
/// gradient block (only the tensors that carry one). 64-bit throughout.
struct edge_shape {
  int count = 0;
  bool varies = false;  // some tensor's extent varies per microbatch
  std::array<tensor_place, max_set_tensors> t{};
  std::size_t bytes = 0, grad_bytes = 0;
};

namespace detail {

constexpr std::size_t round_up64(std::size_t n) { return (n + 63) / 64 * 64; }

/// An identity per element type, equal across translation units (the address of an inline
/// variable), so that run-time checks can say "float where int32 was expected" without RTTI.
template <class T>
struct type_tag {
  static constexpr char id = 0;
};
template <class T>
inline constexpr const void* type_id = &type_tag<T>::id;

/// Fills the offsets of a shape whose tensors have their elems, size and grad set.
constexpr void pack(edge_shape& s) {
  std::size_t at = 0, grad_at = 0;
  s.bytes = s.grad_bytes = 0;
  for (int k = 0; k < s.count; ++k) {
    tensor_place& p = s.t[static_cast<std::size_t>(k)];
    p.offset = at;
    s.bytes = at + p.bytes();
    at = round_up64(s.bytes);
    if (!p.grad) continue;
    p.grad_offset = grad_at;
    s.grad_bytes = grad_at + p.bytes();
    grad_at = round_up64(s.grad_bytes);
  }
}

/// The shape of a declared input/output `X`, with `extent(k)` giving tensor k's elements.
template <class X, class Extent>
constexpr edge_shape shape_of(Extent extent) {
  edge_shape s;
  s.count = set_traits<X>::count;
  [&]<std::size_t... K>(std::index_sequence<K...>) {
    ((s.t[K] = tensor_place{extent(K), sizeof(typename tensor_t<X, K>::value_type), 0, 0, member_t<X, K>::grad,
                            member_t<X, K>::varies, type_id<typename tensor_t<X, K>::value_type>}),
     ...);
    s.varies = (member_t<X, K>::varies || ...);
  }
  (std::make_index_sequence<static_cast<std::size_t>(set_traits<X>::count)>{});
  pack(s);
  return s;
}

/// The shape of microbatch j of a shape with varying tensors: each varying tensor holds
/// elems · length / max_length elements (max_length > 0, elems a multiple of it: checked with the
/// batch), the blocks packed again, so that only the actual bytes travel.
constexpr edge_shape shape_at(const edge_shape& s, std::size_t length, std::size_t max_length) {
  edge_shape a = s;
  for (int k = 0; k < a.count; ++k) {
    tensor_place& p = a.t[static_cast<std::size_t>(k)];
    if (p.varies) p.elems = p.elems / max_length * length;
  }
  pack(a);
  return a;
}

/// The context's view of a declared `X`: std::span<T> for a single tensor, span_set of spans
/// for a set. `Const`: spans of const elements.
template <class X, bool Const, class Seq = std::make_index_sequence<static_cast<std::size_t>(set_traits<X>::count)>>
struct view_of;
template <class X, bool Const, std::size_t... K>
struct view_of<X, Const, std::index_sequence<K...>> {
  template <class T>
  using span_t = std::span<std::conditional_t<Const, const T, T>>;
  using type = std::conditional_t<set_traits<X>::single, span_t<typename tensor_t<X, 0>::value_type>,
                                  span_set<span_t<typename tensor_t<X, K>::value_type>...>>;
};
template <class X, bool Const>
using view_t = typename view_of<X, Const>::type;

template <class V>
struct is_span_set : std::false_type {};
template <class... S>
struct is_span_set<span_set<S...>> : std::true_type {};

/// A view of type V whose tensor k starts at `at(k)` (nullptr: an empty span). `grad`: a
/// gradient view (a no_grad tensor's span is empty).
template <class V, class At>
constexpr V view_with(const edge_shape& s, bool grad, At at) {
  auto one = [&]<class Span>(std::size_t tensor_index, Span*) {
    using T = typename Span::element_type;
    const tensor_place& p = s.t[tensor_index];
    auto* const first = at(tensor_index);
    if (first == nullptr || (grad && !p.grad)) return Span{};
    return Span{reinterpret_cast<T*>(first), p.elems};
  };
  if constexpr (is_span_set<V>::value) {
    return [&]<class... S>(span_set<S...>*) {
      return [&]<std::size_t... K>(std::index_sequence<K...>) {
        return V{one(K, static_cast<std::tuple_element_t<K, std::tuple<S...>>*>(nullptr))...};
      }
      (std::index_sequence_for<S...>{});
    }(static_cast<V*>(nullptr));
  } else {
    return one(0, static_cast<V*>(nullptr));
  }
}

/// A view of type V over one block: the activation block at `base` (grad = false) or the
/// gradient block (grad = true). `base` nullptr: empty spans.
template <class V, class Byte>
constexpr V view_at(Byte* base, const edge_shape& s, bool grad) {
  if constexpr (!is_span_set<V>::value)  // one tensor: at the block's start, with a gradient
    return base ? V{reinterpret_cast<typename V::element_type*>(base), s.t[0].elems} : V{};
  return view_with<V>(s, grad, [&](std::size_t tensor_index) -> Byte* {
    if (base == nullptr) return nullptr;
    const tensor_place& p = s.t[tensor_index];
    return base + (grad ? p.grad_offset : p.offset);
  });
}

}  // namespace detail

/// The inputs of a stage whose incoming edges carry types of their own (per_edge<X...>), or the
/// gradients it writes for them: `v.get<K>()` is the view of the K-th incoming edge's (a std::span
/// for a single tensor, a span_set for a set; empty when the stage has fewer edges). Valid for the
/// call only.
template <bool Const, class... X>
class edge_views {
  using byte_ptr = std::conditional_t<Const, const std::byte*, std::byte*>;

 public:
  constexpr edge_views() = default;
  /// `count` blocks at the addresses `at[0 .. count)`, of shapes `shapes[0 .. count)` (grad:
  /// gradient blocks).
  edge_views(byte_ptr const* at, int count, const edge_shape* shapes, bool grad) noexcept
      : at_(at), count_(count), shapes_(shapes), grad_(grad) {}

  constexpr int size() const noexcept { return count_; }
  constexpr bool empty() const noexcept { return count_ == 0; }
  template <std::size_t K>
  detail::view_t<std::tuple_element_t<K, std::tuple<X...>>, Const> get() const noexcept {
    using V = detail::view_t<std::tuple_element_t<K, std::tuple<X...>>, Const>;
    if (at_ == nullptr || static_cast<int>(K) >= count_) return V{};
    return detail::view_at<V>(at_[K], shapes_[K], grad_);
  }

 private:
  byte_ptr const* at_ = nullptr;
  int count_ = 0;
  const edge_shape* shapes_ = nullptr;
  bool grad_ = false;
};

/// A stage's inputs (or the gradients it writes for them), one per incoming edge, in edge order:
/// `list[k]` is the view of the k-th (a std::span for a single tensor, a span_set for a set).
/// Valid for the call only.
template <class View>
class view_list {
  static constexpr bool is_const = [] {
    if constexpr (detail::is_span_set<View>::value)
      return std::is_const_v<typename decltype(View{}.template get<0>())::element_type>;
    else
      return std::is_const_v<typename View::element_type>;
  }();
  using byte_ptr = std::conditional_t<is_const, const std::byte*, std::byte*>;

 public:
  constexpr view_list() = default;
  /// One view (count 1), or none (count 0).
  constexpr view_list(View one, int count = 1) noexcept : one_(one), count_(count) {}
  /// `count` blocks of `shape` at the addresses `at[0 .. count)` (grad: gradient blocks).
  view_list(byte_ptr const* at, int count, const edge_shape* shape, bool grad) noexcept
      : at_(at), count_(count), shape_(shape), grad_(grad) {}
  /// A single tensor's list: `count` spans of `extent` elements at the addresses `at[0 .. count)`.
  view_list(byte_ptr const* at, int count, std::size_t extent) noexcept requires(!detail::is_span_set<View>::value)
      : at_(at), count_(count), extent_(extent) {}

  constexpr int size() const noexcept { return count_; }
  constexpr bool empty() const noexcept { return count_ == 0; }
  View operator[](int k) const noexcept {
    if (at_ == nullptr) return one_;
    if constexpr (!detail::is_span_set<View>::value)
      if (shape_ == nullptr)  // (no address: an empty view, as a detached edge's gradient)
        return at_[k] ? View{reinterpret_cast<typename View::element_type*>(at_[k]), extent_} : View{};
    return detail::view_at<View>(at_[k], *shape_, grad_);
  }

 private:
  byte_ptr const* at_ = nullptr;
  View one_{};
  int count_ = 0;
  const edge_shape* shape_ = nullptr;
  std::size_t extent_ = 0;
  bool grad_ = false;
};

}  // namespace pipetype

template <class... S>
struct std::tuple_size<pipetype::span_set<S...>> : std::integral_constant<std::size_t, sizeof...(S)> {};
template <std::size_t K, class... S>
struct std::tuple_element<K, pipetype::span_set<S...>> : std::tuple_element<K, std::tuple<S...>> {};
