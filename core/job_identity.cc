#include "core/job_identity.h"

namespace chorus::core {

std::string job_identity(const std::map<std::string, std::string>& env) {
  const auto get = [&env](const char* name) -> std::string {
    const auto it = env.find(name);
    return it == env.end() ? std::string() : it->second;
  };
  if (const std::string job = get("SLURM_JOB_ID"); !job.empty()) {
    const std::string step = get("SLURM_STEP_ID");
    return "slurm:" + job + (step.empty() ? "" : "." + step);
  }
  if (const std::string run = get("TORCHELASTIC_RUN_ID"); !run.empty()) return "torchrun:" + run;
  if (const std::string ns = get("PMIX_NAMESPACE"); !ns.empty()) return "pmix:" + ns;
  if (const std::string job = get("OMPI_MCA_ess_base_jobid"); !job.empty()) return "ompi:" + job;
  return {};
}

}  // namespace chorus::core
