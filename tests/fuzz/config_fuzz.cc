// libFuzzer target: configuration text -> validated Config (core/config.cc).
//
// Input: up to three parts separated by a line "===": the TOML file, API
// settings ("key=value" per line) and environment lines ("NAME=VALUE"). Any
// input must yield a Config or an error Status: no crash, no leak, no hang.
#include "core/config.h"

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace {

std::vector<std::string> split_lines(std::string_view text) {
  std::vector<std::string> out;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    out.emplace_back(text.substr(0, nl));
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string path = "/tmp/chorus-config-fuzz-" + std::to_string(::getpid()) + ".toml";
  std::string_view input(reinterpret_cast<const char*>(data), size);
  std::string_view parts[3];
  for (auto& part : parts) {
    const auto sep = input.find("\n===\n");
    part = input.substr(0, sep);
    input = sep == std::string_view::npos ? std::string_view() : input.substr(sep + 5);
  }

  chorus::core::ConfigInputs in;
  if (FILE* f = std::fopen(path.c_str(), "wb")) {
    std::fwrite(parts[0].data(), 1, parts[0].size(), f);
    std::fclose(f);
    in.api_config_path = path;
  }
  in.api_settings = split_lines(parts[1]);
  for (const std::string& line : split_lines(parts[2])) {
    const auto eq = line.find('=');
    if (eq != std::string::npos) in.env[line.substr(0, eq)] = line.substr(eq + 1);
  }
  auto cfg = chorus::core::load_config(in);
  if (!cfg.is_ok() && cfg.status().message().empty()) __builtin_trap();  // errors explain themselves
  (void)chorus::core::parse_size(std::string(parts[1]));
  (void)chorus::core::slurm_first_host(std::string(parts[2]));
  return 0;
}
