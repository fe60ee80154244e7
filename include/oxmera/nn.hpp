#pragma once
// oxmera::nn: modules, layers, functional forms, initialisers and losses.
#include "oxmera/nn/activation.hpp"
#include "oxmera/nn/attention.hpp"
#include "oxmera/nn/conv.hpp"
#include "oxmera/nn/data_parallel.hpp"
#include "oxmera/nn/functional.hpp"
#include "oxmera/nn/init.hpp"
#include "oxmera/nn/layers.hpp"
#include "oxmera/nn/loss.hpp"
#include "oxmera/nn/module.hpp"
#include "oxmera/nn/norm.hpp"
#include "oxmera/nn/rnn.hpp"
#include "oxmera/nn/transformer.hpp"
