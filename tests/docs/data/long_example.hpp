// A header example longer than .clang-format's ColumnLimit: the formatter must leave it whole
// (tests/CMakeLists.txt, "format: ..."), since tests/docs/code_blocks.py compiles it line for line.
/// Example, given plan, model:
///   pipetype::host::executor ex{plan, model, {.ordered_gradients = true, .trace = true}}; ex.step(batch); ex.step(batch);
int long_example();
