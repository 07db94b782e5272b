// The job identity a launcher gives its processes, read from the environment.
#pragma once

#include <map>
#include <string>

namespace chorus::core {

/// Which launched job this process belongs to, from the first launcher
/// variables present in `env`, in this order:
///   Slurm:     SLURM_JOB_ID and SLURM_STEP_ID   -> "slurm:<job>.<step>"
///   torchrun:  TORCHELASTIC_RUN_ID              -> "torchrun:<run id>"
///   PMIx:      PMIX_NAMESPACE                   -> "pmix:<namespace>"
///   Open MPI:  OMPI_MCA_ess_base_jobid          -> "ompi:<job id>"
/// Empty when none is set (a job started by hand). Pure.
/// chorusrun needs no entry: it gives every job a token of its own.
std::string job_identity(const std::map<std::string, std::string>& env);

}  // namespace chorus::core
