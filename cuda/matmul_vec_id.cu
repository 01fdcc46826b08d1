// matmul_vec_id: matmul_vec.cu's body with experts (ggml's MUL_MAT_ID for decode), one entry per
// weight qtype, matmul_vec_id_<type>. The NVRTC program is this define and matmul_vec.cu (the
// kernel table joins them); the emulator build includes the file.
#define MF_MATMUL_VEC_ID 1
#include "matmul_vec.cu"
