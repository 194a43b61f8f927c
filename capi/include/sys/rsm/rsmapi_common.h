/*
 * <sys/rsm/rsmapi_common.h>: the API-level types and flags of RSMAPI (docs/rsmapi.md §2,
 * §3.4), from rsm's librsm.
 */
#ifndef _SYS_RSM_RSMAPI_COMMON_H
#define _SYS_RSM_RSMAPI_COMMON_H

#include <sys/rsm/rsm_common.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct __rsmapi_controller_handle *rsmapi_controller_handle_t;
typedef struct __rsm_localmemory_handle *rsm_localmemory_handle_t;

typedef struct {
	uint_t attr_direct_access_sizes;
	uint_t attr_atomic_sizes;
	size_t attr_page_size;
	size_t attr_max_export_segment_size;
	size_t attr_tot_export_segment_size;
	ulong_t attr_max_export_segments;
	size_t attr_max_import_map_size;
	size_t attr_tot_import_map_size;
	ulong_t attr_max_import_segments;
} rsmapi_controller_attr_t;

typedef struct {
	rsm_node_id_t ae_node;
	rsm_permission_t ae_permission;
} rsmapi_access_entry_t;

/* Caller storage the library keeps its barrier state in (opaque to applications). */
typedef struct {
	void *seg;
	uint16_t gnum;
	void *privdata;
} rsmapi_barrier_t;

/* rsm_memseg_export_create flags */
#define RSM_ALLOW_REBIND 0x01
#define RSM_CREATE_SEG_DONTWAIT 0x02
/* an rsm extension (DESIGN.md, decision 7): accepted, no atomic operations yet */
#define RSM_LOCK_OPS 0x04

/* rsm_scat_gath_t flags and rsm_intr_signal_post flags */
#define RSM_IMPLICIT_SIGPOST 0x01
#define RSM_SIGPOST_NO_ACCUMULATE 0x02

/* rsm_iovec_t io_type */
#define RSM_HANDLE_TYPE 0x01
#define RSM_VA_TYPE 0x02

typedef struct {
	int io_type;
	union {
		rsm_localmemory_handle_t handle;
		caddr_t vaddr;
	} local;
	size_t local_offset;
	size_t remote_offset;
	size_t transfer_length;
} rsm_iovec_t;

typedef struct {
	rsm_node_id_t local_nodeid;
	ulong_t io_request_count;
	ulong_t io_residual_count;
	uint_t flags;
	rsm_memseg_import_handle_t remote_handle;
	rsm_iovec_t *iovec;
} rsm_scat_gath_t;

#ifdef __cplusplus
}
#endif

#endif /* _SYS_RSM_RSMAPI_COMMON_H */
