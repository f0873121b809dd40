#pragma once
#include "pipetype/core/y.hpp"
