/* A WRITE whose source SGE names an unknown lkey completes with IBV_WC_LOC_QP_OP_ERR, not
 * IBV_WC_LOC_PROT_ERR. */
#include "repro.h"

int main(void)
{
	struct dev d;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	struct pair p;
	struct ibv_wc wc;
	struct ibv_sge s;

	repro_name = "bad-lkey-status";
	d = open_dev();
	pd = ibv_alloc_pd(d.ctx);
	CHECK(pd, "ibv_alloc_pd");
	mr = new_mr(pd, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	p = connect_pair(&d, pd, pd);
	s = sge_of(mr, 0, 64);
	s.lkey = 0xdeadbeef;
	{
		struct ibv_send_wr wr = { .wr_id = 1, .opcode = IBV_WR_RDMA_WRITE, .sg_list = &s,
					  .num_sge = 1 };
		wr.wr.rdma.remote_addr = (uintptr_t)mr->addr + 8192;
		wr.wr.rdma.rkey = mr->rkey;
		wc = exec(p.req, p.req_cq, &wr);
	}
	if (wc.status == IBV_WC_LOC_PROT_ERR)
		verdict(0, "%s", ibv_wc_status_str(wc.status));
	verdict(1, "%s", ibv_wc_status_str(wc.status));
}
