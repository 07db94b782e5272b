// The check a plugin file passes before dlopen: that it is a shared object
// for this machine whose headers and loadable segments lie inside the file.
#pragma once

#include "core/status.h"

#include <string>

namespace chorus::core {

/// Reads the ELF headers of `path` with pread (nothing of the file is mapped)
/// and checks what the dynamic loader would otherwise trust: a regular,
/// readable file; an ELF shared object of this process's class, byte order
/// and machine; program headers inside the file, and every PT_LOAD segment's
/// file range too (the loader maps those ranges, and touching a mapped page
/// past the end of the file raises SIGBUS); section headers, when present,
/// and the contents of every section that occupies file space.
///
/// Blocks only on the file system; thread-safe.
/// @returns OK, or CHORUS_ERR_UNAVAILABLE whose message names the defect
///          without the path ("truncated: segment 2 (PT_LOAD) ends at byte
///          81920 but the file has 40960 bytes"); the caller adds the path.
/// @note The file can still change between this check and dlopen, and the
///       libraries the plugin depends on are not checked (the loader opens
///       them itself).
Status check_elf_file(const std::string& path);

}  // namespace chorus::core
