// A rank for launcher tests: `launcher_rank_helper COUNT` writes COUNT lines
// "line-<rank>-<i>" to stdout and "err-<rank>-<i>" to stderr as fast as it
// can, in write() calls whose sizes have nothing to do with line boundaries,
// so that the launcher sees lines cut at every possible place.
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <string>

namespace {

void write_in_odd_pieces(int fd, const std::string& text) {
  // Sizes chosen to cut lines at varying offsets, plus one larger than a
  // pipe's atomic-write limit (PIPE_BUF, 4096).
  constexpr std::array<std::size_t, 7> kPieces{1, 7, 13, 5000, 3, 64, 29};
  std::size_t pos = 0;
  for (std::size_t i = 0; pos < text.size(); ++i) {
    const std::size_t len = std::min(kPieces[i % kPieces.size()], text.size() - pos);
    const ssize_t n = ::write(fd, text.data() + pos, len);
    if (n <= 0) std::exit(1);
    pos += static_cast<std::size_t>(n);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const char* rank = std::getenv("CHORUS_RANK");
  if (argc != 2 || rank == nullptr) return 2;
  const int count = std::atoi(argv[1]);
  std::string out;
  std::string err;
  for (int i = 0; i < count; ++i) {
    out += "line-" + std::string(rank) + "-" + std::to_string(i) + "\n";
    err += "err-" + std::string(rank) + "-" + std::to_string(i) + "\n";
  }
  write_in_odd_pieces(STDOUT_FILENO, out);
  write_in_odd_pieces(STDERR_FILENO, err);
  return 0;
}
