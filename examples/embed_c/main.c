/* Embedding a policyc-compiled policy in a plain C99 program: ppo_mlp through its typed wrapper.
 *
 * ppo_mlp.h comes from `policyc compile ... --header ppo_mlp.h` and is self-contained (it carries
 * the ABI header); the program links against ppo_mlp.so. See README.md for the build commands.
 */
#include <stdio.h>

#include "ppo_mlp.h"

int main(void) {
  /* One fixed observation (batch 1): 17 floats, as a MuJoCo-style environment would give. */
  float obs[PPO_MLP_OBS_SIZE];
  float action_dist_inputs[PPO_MLP_ACTION_DIST_INPUTS_SIZE];
  float vf[PPO_MLP_VF_SIZE];
  int i;
  int rc;
  for (i = 0; i < PPO_MLP_OBS_SIZE; ++i) obs[i] = 0.1f * (float)((i % 11) - 5);

  /* The first call allocates this thread's workspace; later calls at the same or a smaller batch
   * allocate nothing. ppo_mlp_run_with_workspace() takes a workspace the caller owns instead. */
  rc = ppo_mlp_run(obs, action_dist_inputs, vf, 1);
  if (rc != POLICYC_OK) {
    fprintf(stderr, "ppo_mlp_run failed with code %d\n", rc);
    return 1;
  }
  printf("action_dist_inputs:");
  for (i = 0; i < PPO_MLP_ACTION_DIST_INPUTS_SIZE; ++i) printf(" %.6g", action_dist_inputs[i]);
  printf("\nvf: %.6g\n", vf[0]);
  return 0;
}
