// The training curves as a standalone SVG image: training loss per epoch on the
// left, test accuracy per epoch on the right.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace fmnist {

// Writes atomically (temp file + rename); throws kiln::ValueError on IO errors.
void write_plot_svg(const std::filesystem::path& path, const std::string& title,
                    const std::vector<double>& train_loss,
                    const std::vector<double>& test_accuracy);

}  // namespace fmnist
