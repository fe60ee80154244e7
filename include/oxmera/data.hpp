#pragma once
// Datasets and the DataLoader (namespace oxmera::data).
#include "oxmera/data/dataloader.hpp"
#include "oxmera/data/dataset.hpp"
#include "oxmera/data/sampler.hpp"
