// matmul_vec_pack: matmul_vec.cu's body over the weights of one pack, one entry per weight qtype,
// matmul_vec_pack_<type>. The NVRTC program is this define and matmul_vec.cu (the kernel table
// joins them); the emulator build includes the file.
#define MF_MATMUL_VEC_PACK 1
#include "matmul_vec.cu"
