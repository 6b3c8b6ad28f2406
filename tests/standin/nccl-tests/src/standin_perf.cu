// TEST FIXTURE (see ../README.md): links NCCL and the CUDA runtime like nccl-tests' binaries and
// carries one device kernel, so a build of it proves nvcc, the headers and the libraries work.
#include <cstdio>
#include <cuda_runtime.h>
#include <nccl.h>

__global__ void scale(float *data, float factor, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] *= factor;
}

int main() {
  int version = 0;
  ncclGetVersion(&version);
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess) gpus = 0;
  std::printf("%s stand-in: NCCL %d, %d GPU(s)\n", COLLECTIVE, version, gpus);
  return 0;
}
