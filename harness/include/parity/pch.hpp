// Precompiled header for every Parity translation unit: ATen is the compile-time cost, paid once.
#pragma once
#include <ATen/ATen.h>
#include <fmt/format.h>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>
