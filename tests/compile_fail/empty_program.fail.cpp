// expect: _EMPTY_PROGRAM_>
// A rejected schedule: a program with no ranks.
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
constexpr auto plan = pt::make_plan<pt::from_function<[] { return pt::program_builder{0, 1, 1}.build(); }>>();
