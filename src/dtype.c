// dtype.c — element sizes of the tensor dtypes (its own file so device tests that include backend sources can use it).
#include "internal.h"

size_t fc_dtype_size(fc_dtype dtype) {
    switch (dtype) {
    case FC_E4M3: case FC_E5M2: return 1;
    case FC_BF16: case FC_FP16: return 2;
    case FC_FP32: case FC_INT32: return 4;
    }
    return 0;
}
