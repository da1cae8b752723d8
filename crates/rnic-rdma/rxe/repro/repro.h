/* Shared setup of the rxe deviation reproducers (docs/rdma.md, "rxe deviations").
 *
 * Each reproducer is one small program against plain libibverbs: it opens the device named by
 * PATRONUS_RDMA_DEVICE (default rxe0) with GID index PATRONUS_RDMA_GID (default 1), builds RC
 * QP pairs connected to each other on that one device, does the one thing the deviation is
 * about, and prints exactly one line on stdout:
 *
 *   DEVIATION <name> reproduced   (exit 0)  the device behaves as the deviation says
 *   DEVIATION <name> absent       (exit 1)  it behaves as the IB specification says
 *
 * Anything else (the setup failed, an unexpected result) is a message on stderr and exit 2.
 */
#ifndef PATRONUS_REPRO_H
#define PATRONUS_REPRO_H

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *repro_name = "?";

static void verdict(int reproduced, const char *fmt, ...)
{
	va_list ap;
	printf("DEVIATION %s %s", repro_name, reproduced ? "reproduced" : "absent");
	if (fmt) {
		printf(" (");
		va_start(ap, fmt);
		vprintf(fmt, ap);
		va_end(ap);
		printf(")");
	}
	printf("\n");
	fflush(stdout);
	exit(reproduced ? 0 : 1);
}

static void die(const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "%s: setup failed: ", repro_name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	exit(2);
}

#define CHECK(cond, what) \
	do { \
		if (!(cond)) \
			die("%s (errno %d: %s)", what, errno, strerror(errno)); \
	} while (0)

#define BUF_LEN 65536

struct dev {
	struct ibv_context *ctx;
	uint8_t port;
	int gid_index;
	union ibv_gid gid;
	enum ibv_mtu mtu;
};

/* One RC QP pair on the device: `req` (the requester) and `resp` (the responder), each with its
 * own send and receive CQ. */
struct pair {
	struct ibv_qp *req, *resp;
	struct ibv_cq *req_cq, *req_rcq, *resp_cq, *resp_rcq;
};

static struct dev open_dev(void)
{
	struct dev d = { .port = 1 };
	const char *name = getenv("PATRONUS_RDMA_DEVICE");
	const char *gid = getenv("PATRONUS_RDMA_GID");
	struct ibv_device **list;
	struct ibv_port_attr pa;
	int n, i;

	if (!name || !*name)
		name = "rxe0";
	d.gid_index = gid && *gid ? atoi(gid) : 1;
	list = ibv_get_device_list(&n);
	CHECK(list, "ibv_get_device_list");
	for (i = 0; i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name))
			d.ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	if (!d.ctx)
		die("no device %s", name);
	CHECK(!ibv_query_port(d.ctx, d.port, &pa), "ibv_query_port");
	d.mtu = pa.active_mtu;
	CHECK(!ibv_query_gid(d.ctx, d.port, d.gid_index, &d.gid), "ibv_query_gid");
	/* The async event descriptor is polled with a time bound. */
	CHECK(fcntl(d.ctx->async_fd, F_SETFL,
		    fcntl(d.ctx->async_fd, F_GETFL) | O_NONBLOCK) == 0,
	      "non-blocking async fd");
	return d;
}

static struct ibv_qp *new_qp(struct dev *d, struct ibv_pd *pd, struct ibv_cq *scq,
			     struct ibv_cq *rcq, struct ibv_srq *srq)
{
	struct ibv_qp_init_attr a = {
		.send_cq = scq,
		.recv_cq = rcq,
		.srq = srq,
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 64, .max_recv_wr = srq ? 0 : 64,
			 .max_send_sge = 1, .max_recv_sge = 1 },
	};
	(void)d;
	return ibv_create_qp(pd, &a);
}

/* RESET -> INIT -> RTR -> RTS towards `peer` (on the same device). */
static void bring_up(struct dev *d, struct ibv_qp *qp, uint32_t peer)
{
	struct ibv_qp_attr a;
	int rights = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = d->port;
	a.qp_access_flags = rights;
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				       IBV_QP_ACCESS_FLAGS), "modify INIT");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = d->mtu;
	a.dest_qp_num = peer;
	a.rq_psn = 0;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 1;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = d->gid;
	a.ah_attr.grh.sgid_index = d->gid_index;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = d->port;
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
				       IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
	      "modify RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 6;
	a.sq_psn = 0;
	a.max_rd_atomic = 1;
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				       IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
				       IBV_QP_MAX_QP_RD_ATOMIC), "modify RTS");
}

/* A connected pair: the requester on `req_pd`, the responder on `resp_pd`. */
static struct pair connect_pair(struct dev *d, struct ibv_pd *req_pd, struct ibv_pd *resp_pd)
{
	struct pair p;

	p.req_cq = ibv_create_cq(d->ctx, 64, NULL, NULL, 0);
	p.req_rcq = ibv_create_cq(d->ctx, 64, NULL, NULL, 0);
	p.resp_cq = ibv_create_cq(d->ctx, 64, NULL, NULL, 0);
	p.resp_rcq = ibv_create_cq(d->ctx, 64, NULL, NULL, 0);
	CHECK(p.req_cq && p.req_rcq && p.resp_cq && p.resp_rcq, "ibv_create_cq");
	p.req = new_qp(d, req_pd, p.req_cq, p.req_rcq, NULL);
	p.resp = new_qp(d, resp_pd, p.resp_cq, p.resp_rcq, NULL);
	CHECK(p.req && p.resp, "ibv_create_qp");
	bring_up(d, p.req, p.resp->qp_num);
	bring_up(d, p.resp, p.req->qp_num);
	return p;
}

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* Polls `cq` for one completion for up to `seconds`; 1 if one arrived. */
static int poll_one(struct ibv_cq *cq, struct ibv_wc *wc, double seconds)
{
	double end = now_s() + seconds;
	int n;

	do {
		n = ibv_poll_cq(cq, 1, wc);
		CHECK(n >= 0, "ibv_poll_cq");
		if (n == 1)
			return 1;
		usleep(100);
	} while (now_s() < end);
	return 0;
}

/* Posts `wr` (signaled) on `qp` and waits for its completion on `cq`. */
static struct ibv_wc exec(struct ibv_qp *qp, struct ibv_cq *cq, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad;
	struct ibv_wc wc;
	int rc;

	wr->send_flags |= IBV_SEND_SIGNALED;
	rc = ibv_post_send(qp, wr, &bad);
	if (rc)
		die("ibv_post_send: %s", strerror(rc));
	if (!poll_one(cq, &wc, 10))
		die("no completion in 10 s");
	return wc;
}

static struct ibv_sge sge_of(struct ibv_mr *mr, size_t off, uint32_t len)
{
	struct ibv_sge s = { .addr = (uintptr_t)mr->addr + off, .length = len, .lkey = mr->lkey };
	return s;
}

/* A buffer of BUF_LEN bytes registered on `pd` with `access`. */
static struct ibv_mr *new_mr(struct ibv_pd *pd, int access)
{
	void *buf = aligned_alloc(4096, BUF_LEN);
	struct ibv_mr *mr;

	CHECK(buf, "aligned_alloc");
	memset(buf, 0, BUF_LEN);
	mr = ibv_reg_mr(pd, buf, BUF_LEN, access);
	CHECK(mr, "ibv_reg_mr");
	return mr;
}

/* Binds `mw` over [off, off + len) of `mr` with `rights`, posted on `qp` (send CQ `cq`) with
 * ibv_bind_mw for type 1 and an IBV_WR_BIND_MW request for type 2; returns the status. */
static enum ibv_wc_status bind_mw_on(struct ibv_qp *qp, struct ibv_cq *cq, struct ibv_mw *mw,
			       struct ibv_mr *mr, size_t off, uint64_t len, int rights)
{
	struct ibv_mw_bind_info info = {
		.mr = mr, .addr = (uintptr_t)mr->addr + off, .length = len,
		.mw_access_flags = rights,
	};
	struct ibv_wc wc;

	if (mw->type == IBV_MW_TYPE_1) {
		struct ibv_mw_bind b = { .wr_id = 0xb1d, .send_flags = IBV_SEND_SIGNALED,
					 .bind_info = info };
		int rc = ibv_bind_mw(qp, mw, &b);
		if (rc)
			die("ibv_bind_mw: %s", strerror(rc));
		if (!poll_one(cq, &wc, 10))
			die("no bind completion in 10 s");
	} else {
		struct ibv_send_wr wr = { .wr_id = 0xb1d, .opcode = IBV_WR_BIND_MW };
		wr.bind_mw.mw = mw;
		wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
		wr.bind_mw.bind_info = info;
		wc = exec(qp, cq, &wr);
		if (wc.status == IBV_WC_SUCCESS)
			mw->rkey = wr.bind_mw.rkey;
	}
	return wc.status;
}

/* A type-2 window of `pd`, bound on `qp` (send CQ `cq`) over [off, off + len) of `mr` with
 * `rights`; the reproducer dies if that fails (it is set-up, not the deviation). */
static struct ibv_mw *bound_type2(struct ibv_pd *pd, struct ibv_qp *qp, struct ibv_cq *cq,
				  struct ibv_mr *mr, size_t off, uint64_t len, int rights)
{
	struct ibv_mw *mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	enum ibv_wc_status st;

	CHECK(mw, "ibv_alloc_mw");
	st = bind_mw_on(qp, cq, mw, mr, off, len, rights);
	if (st != IBV_WC_SUCCESS)
		die("type-2 bind: %s", ibv_wc_status_str(st));
	return mw;
}

static struct ibv_wc do_rdma(struct pair *p, enum ibv_wr_opcode op, struct ibv_mr *local,
			     size_t local_off, uint32_t len, uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge s = sge_of(local, local_off, len);
	struct ibv_send_wr wr = { .wr_id = 1, .opcode = op, .sg_list = &s, .num_sge = 1 };

	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	return exec(p->req, p->req_cq, &wr);
}

static void post_recv(struct ibv_qp *qp, struct ibv_mr *mr, size_t off, uint32_t len,
		      uint64_t id)
{
	struct ibv_sge s = sge_of(mr, off, len);
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &s, .num_sge = 1 }, *bad;

	CHECK(!ibv_post_recv(qp, &wr, &bad), "ibv_post_recv");
}

static enum ibv_qp_state qp_state(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	CHECK(!ibv_query_qp(qp, &a, IBV_QP_STATE, &ia), "ibv_query_qp");
	return a.qp_state;
}

#endif
