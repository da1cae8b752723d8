/* A window binds over a region of another PD when the bind is posted as an IBV_WR_BIND_MW
 * request (the only way for type 2, and how rnic-rdma posts type-1 binds too): the kernel
 * never compares the two PDs. libibverbs' ibv_bind_mw() catches it for type 1 in userspace
 * (EPERM) before the provider sees it. */
#include "repro.h"

/* Posts a bind of `mw` over `mr` as an IBV_WR_BIND_MW request; returns its status. */
static enum ibv_wc_status post_bind(struct ibv_qp *qp, struct ibv_cq *cq, struct ibv_mw *mw,
				    struct ibv_mr *mr)
{
	struct ibv_send_wr wr = { .wr_id = 0xb1d, .opcode = IBV_WR_BIND_MW };

	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
	wr.bind_mw.bind_info.mr = mr;
	wr.bind_mw.bind_info.addr = (uintptr_t)mr->addr;
	wr.bind_mw.bind_info.length = 64;
	wr.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_READ;
	return exec(qp, cq, &wr).status;
}

int main(void)
{
	struct dev d;
	struct ibv_pd *pd, *pd2;
	struct ibv_mr *foreign;
	struct ibv_mw *mw1, *mw2;
	struct pair p1, p2;
	enum ibv_wc_status st1, st2;

	repro_name = "bind-mr-other-pd";
	d = open_dev();
	pd = ibv_alloc_pd(d.ctx);
	pd2 = ibv_alloc_pd(d.ctx);
	CHECK(pd && pd2, "ibv_alloc_pd");
	foreign = new_mr(pd2, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	p1 = connect_pair(&d, pd, pd);
	p2 = connect_pair(&d, pd, pd);
	mw1 = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
	mw2 = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	CHECK(mw1 && mw2, "ibv_alloc_mw");
	st1 = post_bind(p1.req, p1.req_cq, mw1, foreign);
	st2 = post_bind(p2.req, p2.req_cq, mw2, foreign);
	if (st1 == IBV_WC_SUCCESS || st2 == IBV_WC_SUCCESS)
		verdict(1, "over a region of another PD: type 1 %s, type 2 %s",
			ibv_wc_status_str(st1), ibv_wc_status_str(st2));
	verdict(0, "type 1 %s, type 2 %s", ibv_wc_status_str(st1), ibv_wc_status_str(st2));
}
