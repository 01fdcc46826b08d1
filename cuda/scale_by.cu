// scale_by: add_bias.cu's kernel multiplying instead of adding, one entry per float weight
// qtype, scale_by_<type>. The NVRTC program is this define and add_bias.cu (the kernel table
// joins them); the emulator build includes the file.
#define MF_SCALE_BY 1
#include "add_bias.cu"
