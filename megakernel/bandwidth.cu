// The streaming-read ceiling (compiled as a module of its own, not part of the step's translation
// unit): every 16-byte word of a buffer of more than twice the L2, grid-stride, four loads in flight a
// thread (4 blocks of 512 threads an SM). Measured 4,450 GB/s on the H200 (results/issue26_a86c5ff), 3.6 %
// under H200.md's 4,616 (mkprobe, a 4 GiB buffer); eight loads in flight through ld.global.cs measured
// 4,368, lower. So every percentage of a run is of a ceiling 3.6 % low: slightly flattering, stated. What it read is folded into one word that
// goes to `sink` only if it is a value the (zeroed) buffer cannot give, so the loads are not removed.
extern "C" __global__ void __launch_bounds__(512) k_read_bw(const uint4* __restrict__ p, unsigned long long n, unsigned* sink) {
  uint4 acc = make_uint4(0, 0, 0, 0);
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 a = p[i], b = p[i + stride], c = p[i + 2 * stride], d = p[i + 3 * stride];
    acc.x ^= a.x ^ b.x ^ c.x ^ d.x;
    acc.y ^= a.y ^ b.y ^ c.y ^ d.y;
    acc.z ^= a.z ^ b.z ^ c.z ^ d.z;
    acc.w ^= a.w ^ b.w ^ c.w ^ d.w;
  }
  for (; i < n; i += stride) acc.x ^= p[i].x ^ p[i].y ^ p[i].z ^ p[i].w;
  if ((acc.x ^ acc.y ^ acc.z ^ acc.w) == 0x9e3779b9u) *sink = 1u;
}
