// Reads the digits files tests/digits/export_digits.py wrote, with both readers (load_idx and load_npy), and
// checks that they agree with each other and with the exporter's sums (so two readers wrong the same way fail).
// Usage: digits_readers DIR PIXEL_SUM LABEL_SUM LABEL0 N   (the numbers are the exporter's printed line)
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <oxmera/formats.hpp>
#include <oxmera/oxmera.hpp>

namespace ox = oxmera;

namespace {

int failures = 0;

void expect(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "FAIL %s\n", what.c_str());
    ++failures;
  }
}

void expect_tensor(const ox::Tensor& t, ox::DType dtype, const ox::Shape& shape, const std::string& file) {
  expect(t.dtype() == dtype, file + ": dtype " + std::string(ox::dtype_name(t.dtype())));
  expect(t.shape() == shape, file + ": shape " + t.shape().str() + ", expected " + shape.str());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: digits_readers DIR PIXEL_SUM LABEL_SUM LABEL0 N\n");
    return 2;
  }
  const std::string dir = argv[1];
  const int64_t pixel_sum = std::atoll(argv[2]), label_sum = std::atoll(argv[3]), label0 = std::atoll(argv[4]),
                n = std::atoll(argv[5]);
  try {
    const ox::Tensor img_idx = ox::load_idx(dir + "/digits-images-idx3-ubyte");
    const ox::Tensor img_npy = ox::load_npy(dir + "/digits-images.npy");
    const ox::Tensor f32_idx = ox::load_idx(dir + "/digits-images-f32.idx");
    const ox::Tensor f32_npy = ox::load_npy(dir + "/digits-images-f32.npy");
    const ox::Tensor lab_idx = ox::load_idx(dir + "/digits-labels-idx1-ubyte");
    const ox::Tensor lab_npy = ox::load_npy(dir + "/digits-labels.npy");
    const ox::Shape images{n, 8, 8}, labels{n};
    expect_tensor(img_idx, ox::DType::U8, images, "digits-images-idx3-ubyte");
    expect_tensor(img_npy, ox::DType::U8, images, "digits-images.npy");
    expect_tensor(f32_idx, ox::DType::F32, images, "digits-images-f32.idx");
    expect_tensor(f32_npy, ox::DType::F32, images, "digits-images-f32.npy");
    expect_tensor(lab_idx, ox::DType::U8, labels, "digits-labels-idx1-ubyte");
    expect_tensor(lab_npy, ox::DType::U8, labels, "digits-labels.npy");
    if (failures) return 1;

    const std::vector<uint8_t> pix = img_idx.to_vector<uint8_t>(), lab = lab_idx.to_vector<uint8_t>();
    const std::vector<float> pix_f32 = f32_idx.to_vector<float>();
    expect(pix == img_npy.to_vector<uint8_t>(), "u8 images: IDX and .npy differ");
    expect(pix_f32 == f32_npy.to_vector<float>(), "f32 images: IDX and .npy differ");
    expect(lab == lab_npy.to_vector<uint8_t>(), "labels: IDX and .npy differ");
    int64_t sum = 0, lsum = 0;
    bool f32_matches_u8 = true, in_range = true;
    for (size_t i = 0; i < pix.size(); ++i) {
      sum += pix[i];
      f32_matches_u8 = f32_matches_u8 && pix_f32[i] == static_cast<float>(pix[i]);
      in_range = in_range && pix[i] <= 16;
    }
    for (uint8_t l : lab) {
      lsum += l;
      in_range = in_range && l <= 9;
    }
    expect(f32_matches_u8, "f32 images differ from the u8 images");
    expect(in_range, "a pixel above 16 or a label above 9");
    expect(sum == pixel_sum, "pixel sum " + std::to_string(sum) + ", the exporter's " + std::to_string(pixel_sum));
    expect(lsum == label_sum, "label sum " + std::to_string(lsum) + ", the exporter's " + std::to_string(label_sum));
    expect(lab[0] == label0, "label 0 is " + std::to_string(lab[0]) + ", the exporter's " + std::to_string(label0));
  } catch (const ox::Error& e) {
    std::fprintf(stderr, "FAIL %s\n", e.what());
    return 1;
  }
  if (failures) return 1;
  std::printf("digits readers: IDX (u8, f32) and .npy agree on %lld images and labels (pixel sum %s)\n",
              static_cast<long long>(n), argv[2]);
  return 0;
}
