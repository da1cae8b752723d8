/* SEND_WITH_INV invalidates a type-2 window bound to another QP than the one it arrives on. */
#include "repro.h"

int main(void)
{
	struct dev d;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	struct ibv_mw *mw;
	struct pair owner, sender;
	struct ibv_wc wc;

	repro_name = "send-inv-any-qp";
	d = open_dev();
	pd = ibv_alloc_pd(d.ctx);
	CHECK(pd, "ibv_alloc_pd");
	mr = new_mr(pd, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	owner = connect_pair(&d, pd, pd);
	sender = connect_pair(&d, pd, pd);
	mw = bound_type2(pd, owner.resp, owner.resp_cq, mr, 8192, 256, IBV_ACCESS_REMOTE_READ);
	wc = do_rdma(&owner, IBV_WR_RDMA_READ, mr, 0, 8, (uintptr_t)mr->addr + 8192, mw->rkey);
	if (wc.status != IBV_WC_SUCCESS)
		die("READ through the window before: %s", ibv_wc_status_str(wc.status));
	post_recv(sender.resp, mr, 0, 64, 7);
	{
		struct ibv_send_wr wr = { .wr_id = 1, .opcode = IBV_WR_SEND_WITH_INV };
		wr.invalidate_rkey = mw->rkey;
		wc = exec(sender.req, sender.req_cq, &wr);
	}
	if (wc.status != IBV_WC_SUCCESS)
		verdict(0, "SEND_WITH_INV from another QP: %s", ibv_wc_status_str(wc.status));
	wc = do_rdma(&owner, IBV_WR_RDMA_READ, mr, 0, 8, (uintptr_t)mr->addr + 8192, mw->rkey);
	if (wc.status == IBV_WC_SUCCESS)
		die("SEND_WITH_INV from another QP succeeded, yet the window still works");
	verdict(1, "SEND_WITH_INV from another QP succeeded; the owner's READ now gets %s",
		ibv_wc_status_str(wc.status));
}
