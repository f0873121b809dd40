// expect: _PARSE_ERROR_>, pipetype::at_line_column<2, 6>
// A rejected schedule: X is not an action kind (line 2, column 6).
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
constexpr auto plan = pt::make_plan<pt::from_text<"0F0,0F1,0B0,0B1\n1F0,1X0,1F1,1B1">>();
