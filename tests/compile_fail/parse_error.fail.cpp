// expect: _PARSE_ERROR_>, pipetype::at_line_column<2, 6>, pipetype::
// expect: "expected F, B, I or W after the stage \(or a PyTorch kind: SEND_F, RECV_B, UNSHARD, \.\.\.\)"
// expect: "write actions as 2F0, 3I1, 1SEND_F0 or \(0F7;7B3\)OVERLAP_F_B, separated by commas, one rank a line"
// expect: in_schedule<pipetype::from_text<?
// A rejected schedule: X is not an action kind (line 2, column 6).
#include <pipetype/pipetype.hpp>
namespace pt = pipetype;
constexpr auto plan = pt::make_plan<pt::from_text<"0F0,0F1,0B0,0B1\n1F0,1X0,1F1,1B1">>();
