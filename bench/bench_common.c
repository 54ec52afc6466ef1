#include "bench/bench_common.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

void ArdBenchDefaults(ArdBenchOptions* options) {
  memset(options, 0, sizeof(*options));
  options->num_sizes = ArdBenchParseSizes("4:256M", options->sizes, kArdBenchMaxSizes);
  options->warmup = 5;
  options->iters = 20;
}

// "16M" -> 16777216; 0 on a malformed number.
static uint64_t ParseSize(const char* text, const char* end) {
  char* stop = NULL;
  unsigned long long value = strtoull(text, &stop, 10);
  if (stop == text) return 0;
  if (stop < end) {
    switch (*stop) {
      case 'K':
      case 'k':
        value <<= 10;
        break;
      case 'M':
      case 'm':
        value <<= 20;
        break;
      case 'G':
      case 'g':
        value <<= 30;
        break;
      default:
        return 0;
    }
    ++stop;
  }
  return stop == end ? (uint64_t)value : 0;
}

int ArdBenchParseSizes(const char* text, uint64_t* out, int max) {
  const char* colon = strchr(text, ':');
  int n = 0;
  if (colon != NULL) {
    uint64_t lo = ParseSize(text, colon);
    uint64_t hi = ParseSize(colon + 1, colon + 1 + strlen(colon + 1));
    if (lo == 0 || hi < lo) return -1;
    for (uint64_t s = lo; s <= hi; s *= 2) {
      if (n == max) return -1;
      out[n++] = s;
    }
    return n;
  }
  const char* p = text;
  while (*p != '\0') {
    const char* comma = strchr(p, ',');
    const char* end = comma ? comma : p + strlen(p);
    uint64_t s = ParseSize(p, end);
    if (s == 0 || n == max) return -1;
    out[n++] = s;
    p = comma ? comma + 1 : end;
  }
  return n > 0 ? n : -1;
}

// The value after "--name=" or the next argument after "--name"; NULL when absent.
static const char* FlagValue(int argc, char** argv, int* i, const char* name) {
  size_t len = strlen(name);
  if (strncmp(argv[*i], name, len) != 0) return NULL;
  if (argv[*i][len] == '=') return argv[*i] + len + 1;
  if (argv[*i][len] == '\0' && *i + 1 < argc) return argv[++*i];
  return NULL;
}

static int ParseCount(const char* flag, const char* value, int min, int* out) {
  char* stop = NULL;
  long v = strtol(value, &stop, 10);
  if (*value == '\0' || *stop != '\0' || v < min || v > 1000000) {
    fprintf(stderr, "bad value for %s: '%s'\n", flag, value);
    return -1;
  }
  *out = (int)v;
  return 1;
}

int ArdBenchParseFlag(int argc, char** argv, int* i, ArdBenchOptions* options) {
  const char* v;
  if (strcmp(argv[*i], "--check") == 0) {
    options->check = 1;
    return 1;
  }
  if ((v = FlagValue(argc, argv, i, "--warmup")) != NULL) {
    return ParseCount("--warmup", v, 0, &options->warmup);
  }
  if ((v = FlagValue(argc, argv, i, "--iters")) != NULL) {
    return ParseCount("--iters", v, 1, &options->iters);
  }
  if ((v = FlagValue(argc, argv, i, "--sizes")) != NULL) {
    options->num_sizes = ArdBenchParseSizes(v, options->sizes, kArdBenchMaxSizes);
    if (options->num_sizes < 0) {
      fprintf(stderr, "bad --sizes '%s' (A:B or A,B,C with K/M/G suffixes)\n", v);
      return -1;
    }
    return 1;
  }
  return 0;
}

float ArdBenchPattern(int rank, uint64_t i) {
  return (float)((i * 5 + (uint64_t)rank * 3) % 7 + (uint64_t)rank % 5);
}

uint64_t ArdBenchCountWrong(const float* result, uint64_t count, int ranks) {
  // The expected value has period 7 in i: compute one period, then compare.
  float expected[7];
  for (int r = 0; r < 7; ++r) {
    float sum = 0;
    for (int k = 0; k < ranks; ++k) sum += ArdBenchPattern(k, (uint64_t)r);
    expected[r] = sum;
  }
  uint64_t wrong = 0;
  for (uint64_t i = 0; i < count; ++i) wrong += result[i] != expected[i % 7];
  return wrong;
}

void ArdBenchPrintColumns(FILE* out, int check, const char* extra_titles) {
  fprintf(out, "#%11s %12s %8s %6s %10s %7s %7s%s%s%s\n", "size", "count", "type", "redop", "time",
          "algbw", "busbw", check ? " #wrong" : "", extra_titles[0] != '\0' ? " " : "",
          extra_titles);
  fprintf(out, "#%11s %12s %8s %6s %10s %7s %7s\n", "(B)", "(elements)", "", "", "(us)", "(GB/s)",
          "(GB/s)");
  fflush(out);
}

void ArdBenchPrintRow(FILE* out, uint64_t size_bytes, double time_us, int ranks, int check,
                      uint64_t wrong, const char* extra) {
  double algbw = time_us > 0 ? (double)size_bytes / (time_us * 1e3) : 0;
  double busbw = ranks > 1 ? algbw * 2.0 * (ranks - 1) / ranks : algbw;
  fprintf(out, "%12llu %12llu %8s %6s %10.1f %7.2f %7.2f", (unsigned long long)size_bytes,
          (unsigned long long)(size_bytes / sizeof(float)), "float32", "sum", time_us, algbw,
          busbw);
  if (check) fprintf(out, " %6llu", (unsigned long long)wrong);
  fprintf(out, "%s%s\n", extra[0] != '\0' ? " " : "", extra);
  fflush(out);
}

double ArdBenchNowUs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}
