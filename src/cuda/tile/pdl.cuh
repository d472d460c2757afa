// pdl.cuh — programmatic dependent launch (sm_90): a kernel starts launching while the one before it ends.
#pragma once

// Let the next kernel in the stream (if launched with the PDL attribute) begin launching now; its CTAs
// still wait in pdl_wait() until this whole grid has finished and its writes are visible.
__device__ __forceinline__ void pdl_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }

// Wait until the previous kernel in the stream has completed and its memory is visible (returns at
// once when this kernel was launched without the PDL attribute). Call before any global access.
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
