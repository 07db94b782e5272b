// Reading JACCL's device matrix from its JSON file.
#ifndef JACCL_SRC_DEVICE_FILE_H_
#define JACCL_SRC_DEVICE_FILE_H_

#include <string>
#include <vector>

namespace jaccl::detail {

/// devices[i][j]: the names of the devices linking rank i to rank j.
using DeviceMatrix = std::vector<std::vector<std::vector<std::string>>>;

/// Parse `path`: a JSON array with one array per rank, each of that array's
/// length, whose entries are null, a device name, or an array of names.
/// Throws std::runtime_error naming the file and the offending entry.
DeviceMatrix read_device_file(const char* path);

}  // namespace jaccl::detail

#endif  // JACCL_SRC_DEVICE_FILE_H_
