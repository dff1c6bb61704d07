cdef class Pipeline:
    cdef public object name, partner
    cdef public double throughput, effective, busy_work
    cdef public long long latency, free_at
    cdef public bint queued
    cpdef long long take(self, long long t, long long occ, double work) except? -1

cdef class BandwidthServer:
    cdef public object name
    cdef public double bytes_per_cycle, free_at, bytes, busy_cycles

cdef class DramServer(BandwidthServer):
    cdef public double read_cost, write_cost, delta, window, recent_r, recent_w, dirty
    cdef public object last_t
    cpdef double serve_kind(self, long long t, double nbytes, bint write) except? -1

cdef class LruCache:
    cdef public double capacity, used, hit_bytes, miss_bytes
    cdef public object lines
    cdef public long long hits, misses

cdef class CycleHeap:
    cdef public object buf
    cdef long long[:] view
    cdef public Py_ssize_t n
    cpdef void push(self, long long x) except *
    cpdef long long pop(self) except? -1
