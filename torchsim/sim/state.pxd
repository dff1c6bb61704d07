cdef class CtaState:
    cdef public long long seq, base, cls, remaining, sm
    cdef public object prep, info, params, keys, smo
    cdef public list pred, bar, bar_wait, ready_t, why, grp_last, data_at
    cdef public list qinfo, group, rkind, data_succ, need, barrier, code

cdef class SmState:
    cdef public long long index, spmax, wake, threads, regs, smem, ctas
    cdef public object units
    cdef public list ulist, sp_free, queues
