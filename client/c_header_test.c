/* allreduced_client.h is a C header: this file is compiled as C99 and links the static library. */
#include <stdio.h>
#include <string.h>

#include "client/allreduced_client.h"

int main(void) {
  ard_options options;
  ard_request request;
  ard_client* client = NULL;
  char err[256];
  ard_options_init(&options);
  ard_request_init(&request);
  if (options.rank != -1 || request.group_id != -1 || request.prescale != 1.0) return 1;
  if (strcmp(ard_code_name(ARD_UNAVAILABLE), "UNAVAILABLE") != 0) return 1;
  if (strcmp(ard_client_job(NULL), "") != 0) return 1;
  request.collective = ARD_REDUCESCATTER; /* the named constants are plain C enumerators */
  request.dtype = ARD_BFLOAT16;
  request.reduce_op = ARD_PRODUCT;
  options.socket_path = "/tmp/ard-c-header-test-none.sock";
  options.rank = 0;
  options.size = 1;
  options.local_rank = 0;
  options.local_size = 1;
  if (ard_client_create(&options, &client, err, sizeof(err)) != ARD_UNAVAILABLE) return 1;
  if (client != NULL) return 1;
  printf("%s\n", err);
  return 0;
}
