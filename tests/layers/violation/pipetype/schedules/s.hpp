#pragma once
#include "pipetype/compile/x.hpp"
