#pragma once
// Umbrella header of oxmera.
#include "oxmera/autograd.hpp"
#include "oxmera/device.hpp"
#include "oxmera/dtype.hpp"
#include "oxmera/error.hpp"
#include "oxmera/memory.hpp"
#include "oxmera/random.hpp"
#include "oxmera/shape.hpp"
#include "oxmera/tensor.hpp"
#include "oxmera/version.hpp"
