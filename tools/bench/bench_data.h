// Deterministic inputs and exact reference results for chorus-bench -c and
// the collective tests. Values are small integers (or powers of two and i for
// products) so every dtype holds every input and every result exactly, and
// the reference needs no tolerance whatever the reduction order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace chorus::bench {

/// Bytes per element of `dtype` (0 if unknown).
size_t element_size(int dtype);

/// Fills `in` (`elems` elements) with rank `rank`'s input for `collective`
/// (a chorus_collective_t; -1 for send/recv). `count` is the per-rank count.
void fill_input(int collective, int dtype, int op, int rank, int nranks, void* in, size_t elems,
                size_t count);

/// The exact output rank `rank` must hold after the operation. For send/recv
/// (`sendrecv` true) the output is the left neighbour's input. For reduce and
/// gather it is empty on ranks other than `root`. Inputs are those of
/// fill_input: all_to_all and scatter blocks are `count` elements each.
void expected_output(int collective, bool sendrecv, int dtype, int op, int rank, int nranks,
                     int root, size_t count, std::vector<std::byte>& out);

/// Number of elements of `got` that differ bitwise from `expect`.
uint64_t count_wrong(int dtype, const void* got, const void* expect, size_t elems);

}  // namespace chorus::bench
